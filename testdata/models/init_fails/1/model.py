"""init_fails: initialize raises, so the model never loads.

The load error must carry the message "init_fails: initialize refuses to
load this model" and the traceback pointing at this file.
"""


def check_resources(args):
    raise ValueError("init_fails: initialize refuses to load this model (instance %s)" % args["model_instance_name"])


class TritonPythonModel:
    def initialize(self, args):
        check_resources(args)

    def execute(self, requests):
        raise AssertionError("init_fails: execute must never run")
