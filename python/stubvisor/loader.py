"""Importing a model.py the way Triton's stub does, and describing errors
the way Triton's stub words them.

Import semantics: the version directory and the model directory go on
sys.path, and the file is imported as the submodule "<version>.<stem>" of a
package rooted at the version directory, so a model can use both
``import sibling`` and ``from . import sibling``.
"""

import importlib
import importlib.machinery
import importlib.util
import os
import sys
import traceback


class StubError(Exception):
    """An error the stub itself raises; its text goes to the client as is
    (Triton's stub raises these as C++ exceptions, without a Python type
    name or traceback)."""


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def describe(exc):
    """Return the text of an exception as Triton's stub reports it: the
    type name and message, then the model's frames innermost first.
    StubError texts are returned bare."""
    if isinstance(exc, StubError):
        return str(exc)
    text = "%s: %s" % (type(exc).__name__, exc)
    frames = [
        f for f in traceback.extract_tb(exc.__traceback__)
        if not os.path.abspath(f.filename).startswith(_PACKAGE_DIR + os.sep)
    ]
    if frames:
        text += "\n\nAt:\n" + "".join("  %s(%d): %s\n" % (f.filename, f.lineno, f.name) for f in reversed(frames))
    return text


def import_model(model_file):
    """Import model_file and return the module. Raises StubError for a
    missing file or a bad name, and whatever the model's import raises."""
    if not os.path.exists(model_file):
        raise StubError("Python model file not found in '" + model_file + "'")
    model_file = os.path.abspath(model_file)
    filename = os.path.basename(model_file)
    if not filename.endswith(".py") or filename == ".py":
        raise StubError("Model name must end with '.py'. Model name is \"" + filename + "\".")
    stem = filename[:-3]
    version_dir = os.path.dirname(model_file)
    model_dir = os.path.dirname(version_dir)
    for path in (version_dir, model_dir):
        if path not in sys.path:
            sys.path.append(path)
    package = os.path.basename(version_dir)
    if package not in sys.modules:
        init = os.path.join(version_dir, "__init__.py")
        if os.path.exists(init):
            spec = importlib.util.spec_from_file_location(package, init, submodule_search_locations=[version_dir])
        else:
            spec = importlib.machinery.ModuleSpec(package, None, is_package=True)
            spec.submodule_search_locations = [version_dir]
        module = importlib.util.module_from_spec(spec)
        sys.modules[package] = module
        if spec.loader is not None:
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[package]
                raise
    return importlib.import_module(package + "." + stem)
