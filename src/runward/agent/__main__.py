"""The blob's entry. Run by the bootstrap (boot.BOOTSTRAP) with MODULES, the marshalled code
object of every module of this package by relative path: it installs a finder that imports them as
the package "runward_agent" (no file on disk), records how the agent came (boot.SHIPPED),
and runs main. In the source tree, `python -m runward.agent` just runs main."""

import marshal
import sys

PACKAGE = "runward_agent"


class CodeFinder(object):
    """A meta path finder and loader serving PACKAGE and its submodules from marshalled code
    objects, each unmarshalled when its module is imported."""

    def __init__(self, codes):
        self.codes = codes
        # the import system's own ModuleSpec, already loaded: importlib.machinery would be
        # an import of its own on every call
        frozen = sys.modules.get("_frozen_importlib")
        if frozen is None:
            import importlib.machinery as frozen
        self.spec = frozen.ModuleSpec

    def find_spec(self, fullname, path=None, target=None):
        if fullname != PACKAGE and not fullname.startswith(PACKAGE + "."):
            return None
        stem = fullname[len(PACKAGE) + 1:].replace(".", "/")
        init = stem + "/__init__.py" if stem else "__init__.py"
        if init in self.codes:
            return self.spec(fullname, self, loader_state=init, is_package=True)
        if stem + ".py" in self.codes:
            return self.spec(fullname, self, loader_state=stem + ".py")
        return None

    def create_module(self, spec):
        return None  # the default module object

    def exec_module(self, module):
        exec(marshal.loads(self.codes[module.__spec__.loader_state]), module.__dict__)


if "MODULES" in globals():
    sys.meta_path.insert(0, CodeFinder(MODULES))  # noqa: F821 (given by the bootstrap)
    __package__ = PACKAGE
    from .core import boot
    boot.SHIPPED.update(source=AGENT_SOURCE, sha=AGENT_SHA, cached=AGENT_CACHED, codes=MODULES)  # noqa: F821

from .main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
