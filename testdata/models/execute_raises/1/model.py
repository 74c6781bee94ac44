"""execute_raises: execute always raises.

The whole batch must fail with INTERNAL and the text "Failed to process
the request(s) for model '<instance>', message: RuntimeError: ..." with
the traceback of this file.
"""


class TritonPythonModel:
    def execute(self, requests):
        self.fail(len(requests))

    def fail(self, count):
        raise RuntimeError("execute_raises: failing a batch of %d request(s) on purpose" % count)
