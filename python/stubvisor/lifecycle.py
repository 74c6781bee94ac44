"""The commands around execute (AutoComplete, Initialize, IsReady,
Finalize) and the small runtime calls pb_utils makes (logging,
is_cancelled). The Python side of supervisor/stubproc/proc.go's life cycle."""

import asyncio
import json
import os
import sys
import threading
import time

import triton_python_backend_utils as pb

from .common import (
    _INTERNAL,
    _K_LOG,
    _K_RESULT,
    _clip,
    _exit_now,
    _over_memory,
)
from .fields import (
    AUTO_COMPLETE_CONFIG_JSON,
    AUTO_COMPLETE_OPTIONS,
    INITIALIZE_ARGS,
    INITIALIZE_OPTIONS,
    M_ID,
)
from .bls import BLSLoop
from .loader import StubError, describe, import_model


class LifecycleMixin:
    """The part of Host that runs the model's life cycle."""

    def is_cancelled(self, handle):
        if handle in self._cancelled:
            return True
        self._drain()
        return handle in self._cancelled

    def bls_allowed(self):
        return self.initialized and not self.finalizing

    def log(self, level, message, filename, line):
        if os.getpid() != self._owner_pid:
            # A process the model forked logs to its stderr, which the
            # supervisor reads as the stub's output.
            sys.stderr.write("%s %s:%d] %s\n" % (level, filename, line, message))
            return
        self._send([_K_LOG, 0, level, _clip(message), filename, line])

    def _diag(self, level, message):
        frame = sys._getframe(1)
        self._send([_K_LOG, 0, level, _clip(message), os.path.basename(frame.f_code.co_filename), frame.f_lineno])

    def _reply(self, msg_id, error, value):
        self._send([_K_RESULT, msg_id, error, value])

    def _load_module(self, model_file):
        if self.module is not None and self.model_file == model_file:
            return self.module
        self.model_file = model_file
        self.model_dir = os.path.dirname(os.path.abspath(model_file))
        self.module = import_model(model_file)
        return self.module

    def _on_auto_complete(self, msg):
        msg_id, options, config_json = msg[M_ID], msg[AUTO_COMPLETE_OPTIONS], msg[AUTO_COMPLETE_CONFIG_JSON]
        try:
            module = self._load_module(options["model_file"])
            cls = getattr(module, "TritonPythonModel")
            config = pb.ModelConfig(config_json)
            if hasattr(cls, "auto_complete_config"):
                config = cls.auto_complete_config(config)
            if not isinstance(config, pb.ModelConfig):
                raise StubError("auto_complete_config function in model '" + self.instance
                                + "' must return a valid pb.ModelConfig object.")
            result = json.dumps(config._model_config)
        except Exception as exc:
            text = _clip(describe(exc))
            self._diag("ERROR", "Failed to initialize Python stub for auto-complete: " + text)
            self._reply(msg_id, [_INTERNAL, text], None)
            return
        self._reply(msg_id, None, result)

    def _on_initialize(self, msg):
        msg_id, args, options = msg[M_ID], msg[INITIALIZE_ARGS], msg[INITIALIZE_OPTIONS]
        try:
            self.decoupled = bool(options.get("decoupled", False))
            self.force_cpu = bool(options.get("force_cpu_only_input_tensors", True))
            self.model_name = args.get("model_name", self.instance)
            try:
                self.model_version = int(args.get("model_version", "-1"))
            except ValueError:
                self.model_version = -1
            started = time.monotonic()
            module = self._load_module(options["model_file"])
            imported = time.monotonic()
            self.model = getattr(module, "TritonPythonModel")()
            # BLS stays refused until initialize has returned, as in Triton
            # ("BLS is only supported during the 'execute' function.").
            if hasattr(self.model, "initialize"):
                self.model.initialize(dict(args))
            self.initialized = True
            done = time.monotonic()
        except Exception as exc:
            _over_memory(exc)
            self.model = None
            text = _clip(describe(exc))
            self._diag("ERROR", "Failed to initialize Python stub: " + text)
            self._reply(msg_id, [_INTERNAL, text], None)
            return
        # Tell the supervisor whether readiness requests must ask the model,
        # and how long importing model.py and initialize() took.
        self._reply(msg_id, None, {"is_ready": hasattr(self.model, "is_ready"),
                                   "import_s": imported - started, "initialize_s": done - imported})

    def _on_is_ready(self, msg):
        """Run the model's is_ready() (on a thread of its own, see
        _dispatch) and answer. It may take as long as it takes: the
        supervisor stops waiting after 5 s and keeps the answer for the
        readiness requests that come meanwhile, as Triton does."""
        msg_id = msg[M_ID]
        model = self.model
        check = getattr(model, "is_ready", None) if model is not None else None
        if check is None:
            self._reply(msg_id, None, model is not None)
            return
        try:
            ready = check()
            if asyncio.iscoroutine(ready):
                ready = asyncio.run_coroutine_threadsafe(ready, self._async_loop()).result()
        except Exception as exc:
            text = describe(exc)
            self._diag("ERROR", "is_ready() failed: " + text)
            self._reply(msg_id, [_INTERNAL, text], False)
            return
        if not isinstance(ready, bool):
            text = "is_ready() must return a boolean value"
            self._diag("ERROR", "%s, found type '%s'" % (text, type(ready)))
            self._reply(msg_id, [_INTERNAL, text], False)
            return
        self._reply(msg_id, None, ready)

    def _on_finalize(self, msg):
        self.finalizing = True
        loop = self._aloop
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
        model = self.model
        if model is not None and self.initialized and hasattr(model, "finalize"):
            try:
                model.finalize()
            except Exception as exc:
                self._diag("ERROR", "finalize() failed: " + describe(exc))
        self._stop.set()
        self._beat_wake.set()
        self._flush_frees()
        self._reply(msg[M_ID], None, None)
        _exit_now(0)

    def _async_loop(self):
        loop = self._aloop
        if loop is None:
            # The main thread (execute) and the is_ready() thread may both
            # be first: one loop for both.
            with self._cond:
                loop = self._aloop
                if loop is None:
                    # The stub's own loop reads async_exec answers itself
                    # (bls.py), unless the model installed a loop policy.
                    if type(asyncio.get_event_loop_policy()) is asyncio.DefaultEventLoopPolicy:
                        loop = BLSLoop(self)
                        self._loop_reads = self.decoupled
                    else:
                        loop = asyncio.new_event_loop()
                    threading.Thread(target=loop.run_forever, name="stubvisor-asyncio", daemon=True).start()
                    self._aloop = loop
        return loop
