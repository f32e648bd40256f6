"""A cache entry's tensor checks in one C++ call.

An entry checks each tensor it reads (type, dtype, device, shape, strides,
``requires_grad``) before its graph may run. In Python such a check is five
attribute reads and two tuples made, about 0.45 us a tensor: a model's
parameters make it 70-110 us per call (150 tensors of a ViT-S), on a host that a
small batch keeps busy. Read in C++ from each tensor's ``TensorImpl`` the same
facts cost about 10 ns a tensor.

The entry reads its tensors as before and hands the static ones (no symbolic
dims; exact ``torch.Tensor`` or ``nn.Parameter``) to one ``TensorChecks`` object
per entry: ``checks.run(v2, v12, ...)``. ``run`` is the C++ check once the
extension is loaded, a Python loop over the same facts until then. The checks of
each module the entry binds (its class, an instance ``forward``, hooks) are one
call each in place (``surge_native.module_alike(...)``): a module is checked
before anything is read through it.

The extension is compiled with the system C++ compiler against the installed
torch's headers (about 20 s of one CPU, once per machine, torch and Python) into
``<cache_dir>/native/``, in a thread beside the first compile: entries made
before it is ready check in Python and switch to C++ when it loads. Where it
cannot be built (no compiler, no ``Python.h``; ``SURGE_NATIVE_CHECKS=0``) entries
keep their inline Python checks, and the reason is logged once (``perf``).
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import subprocess
import sys
import sysconfig
import tempfile
import threading
import weakref

import torch

from .. import logs

MODULE_NAME = "surge_tensor_checks"
BUILD_TIMEOUT_S = 300

SOURCE = r"""
#include <Python.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>
#include <vector>

namespace {

struct Spec {
  PyTypeObject* type;
  c10::ScalarType dtype;
  c10::Device device;
  bool requires_grad;
  std::vector<int64_t> sizes, strides;
};

const char* const CAPSULE = "surge.tensor_specs";
PyObject *FORWARD, *BACKWARD_HOOKS, *BACKWARD_PRE_HOOKS, *FORWARD_HOOKS, *FORWARD_PRE_HOOKS;  // interned names

void free_specs(PyObject* capsule) {
  delete static_cast<std::vector<Spec>*>(PyCapsule_GetPointer(capsule, CAPSULE));
}

bool read_ints(PyObject* tuple, std::vector<int64_t>& out) {
  if (!PyTuple_Check(tuple)) return false;
  for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(tuple); k++) {
    long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(tuple, k));
    if (v == -1 && PyErr_Occurred()) return false;
    out.push_back(v);
  }
  return true;
}

// specs((type, dtype, device, requires_grad, shape tuple, stride tuple), ...) -> capsule
PyObject* make_specs(PyObject*, PyObject* arg) {
  PyObject* seq = PySequence_Fast(arg, "specs: a sequence");
  if (!seq) return nullptr;
  auto* specs = new std::vector<Spec>();
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *type, *dtype, *device, *sizes, *strides;
    int requires_grad;
    PyObject* item = PySequence_Fast_GET_ITEM(seq, i);
    if (!PyArg_ParseTuple(item, "O!O!O!pOO", &PyType_Type, &type, &THPDtypeType, &dtype,
                          &THPDeviceType, &device, &requires_grad, &sizes, &strides)) {
      delete specs; Py_DECREF(seq); return nullptr;
    }
    Spec s{(PyTypeObject*)type, ((THPDtype*)dtype)->scalar_type, ((THPDevice*)device)->device,
           requires_grad != 0, {}, {}};
    if (!read_ints(sizes, s.sizes) || !read_ints(strides, s.strides) || s.sizes.size() != s.strides.size()) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "shape and stride: tuples of ints of one length");
      delete specs; Py_DECREF(seq); return nullptr;
    }
    specs->push_back(std::move(s));
  }
  Py_DECREF(seq);
  PyObject* capsule = PyCapsule_New(specs, CAPSULE, free_specs);
  if (!capsule) delete specs;
  return capsule;
}

bool matches(const Spec& s, PyObject* obj) {
  // The exact class first: only then is obj a THPVariable whose properties are torch's.
  if (Py_TYPE(obj) != s.type) return false;
  c10::TensorImpl* impl = THPVariable_Unpack(obj).unsafeGetTensorImpl();
  if (impl->has_symbolic_sizes_strides() || impl->layout() != c10::kStrided) return false;
  if (impl->dtype().toScalarType() != s.dtype || impl->device() != s.device) return false;
  if (impl->requires_grad() != s.requires_grad) return false;
  c10::IntArrayRef sizes = impl->sizes(), strides = impl->strides();
  if (sizes.size() != s.sizes.size()) return false;
  for (size_t k = 0; k < sizes.size(); k++)
    if (sizes[k] != s.sizes[k] || strides[k] != s.strides[k]) return false;
  return true;
}

// check(specs, *tensors) -> bool: every tensor is like its spec
PyObject* check(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 1) { PyErr_SetString(PyExc_TypeError, "check(specs, *tensors)"); return nullptr; }
  auto* specs = static_cast<std::vector<Spec>*>(PyCapsule_GetPointer(args[0], CAPSULE));
  if (!specs) return nullptr;
  if (static_cast<size_t>(nargs - 1) != specs->size()) Py_RETURN_FALSE;
  try {
    for (Py_ssize_t i = 1; i < nargs; i++)
      if (!matches((*specs)[i - 1], args[i])) Py_RETURN_FALSE;
  } catch (...) {  // a tensor whose sizes cannot be read here: not one the entry saw
    Py_RETURN_FALSE;
  }
  Py_RETURN_TRUE;
}

// module_alike(m, cls, forward_in_dict, backward_hooks) -> bool: what codegen.module_check
// tests in Python: m's exact class, whether its instance dict holds a `forward`, whether
// it has backward hooks (both tables are instance attributes of an nn.Module).
PyObject* module_alike(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 4) { PyErr_SetString(PyExc_TypeError, "module_alike(m, cls, forward_in_dict, backward_hooks)"); return nullptr; }
  if ((PyObject*)Py_TYPE(args[0]) != args[1]) Py_RETURN_FALSE;
  PyObject* dict = PyObject_GenericGetDict(args[0], nullptr);
  if (!dict) return nullptr;
  bool ok = false;
  int forward = PyDict_Contains(dict, FORWARD);
  if (forward >= 0 && (forward == 1) == (args[2] == Py_True)) {
    PyObject* hooks = PyDict_GetItemWithError(dict, BACKWARD_HOOKS);
    PyObject* pre_hooks = hooks ? PyDict_GetItemWithError(dict, BACKWARD_PRE_HOOKS) : nullptr;
    if (pre_hooks) {
      int any = PyObject_IsTrue(hooks);
      if (any == 0) any = PyObject_IsTrue(pre_hooks);
      ok = any >= 0 && (any == 1) == (args[3] == Py_True);
    }
  }
  Py_DECREF(dict);
  if (PyErr_Occurred()) return nullptr;
  return PyBool_FromLong(ok);
}

// no_forward_hooks(m) -> bool: `not (m._forward_hooks or m._forward_pre_hooks)`
PyObject* no_forward_hooks(PyObject*, PyObject* m) {
  PyObject* dict = PyObject_GenericGetDict(m, nullptr);
  if (!dict) return nullptr;
  int any = -1;
  PyObject* hooks = PyDict_GetItemWithError(dict, FORWARD_HOOKS);
  PyObject* pre_hooks = hooks ? PyDict_GetItemWithError(dict, FORWARD_PRE_HOOKS) : nullptr;
  if (pre_hooks) {
    any = PyObject_IsTrue(hooks);
    if (any == 0) any = PyObject_IsTrue(pre_hooks);
  }
  Py_DECREF(dict);
  if (any < 0) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_AttributeError, "no hook tables: not an nn.Module");
    return nullptr;
  }
  return PyBool_FromLong(any == 0);
}

PyMethodDef methods[] = {
    {"module_alike", (PyCFunction)(void (*)(void))module_alike, METH_FASTCALL, "module_alike(m, cls, forward_in_dict, backward_hooks)"},
    {"no_forward_hooks", no_forward_hooks, METH_O, "no_forward_hooks(m)"},
    {"make_specs", make_specs, METH_O, "specs -> capsule"},
    {"check", (PyCFunction)(void (*)(void))check, METH_FASTCALL, "check(specs, *tensors) -> bool"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "surge_tensor_checks", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit_surge_tensor_checks() {
  FORWARD = PyUnicode_InternFromString("forward");
  BACKWARD_HOOKS = PyUnicode_InternFromString("_backward_hooks");
  BACKWARD_PRE_HOOKS = PyUnicode_InternFromString("_backward_pre_hooks");
  FORWARD_HOOKS = PyUnicode_InternFromString("_forward_hooks");
  FORWARD_PRE_HOOKS = PyUnicode_InternFromString("_forward_pre_hooks");
  if (!FORWARD || !BACKWARD_HOOKS || !BACKWARD_PRE_HOOKS || !FORWARD_HOOKS || !FORWARD_PRE_HOOKS) return nullptr;
  return PyModule_Create(&module_def);
}
"""


# ---------------------------------------------------------------- the checks an entry calls

class TensorChecks:
    """The static tensor checks of one entry: ``run(*tensors)`` is True when each
    tensor is like its spec ``(class, dtype, device, requires_grad, shape, stride)``.
    Stored with a capture on disk as its specs (``disk_value``)."""

    disk_value = True
    __slots__ = ("specs", "run", "__weakref__")

    def __init__(self, specs):
        self.specs = tuple(specs)
        self.run = _python_run(self.specs)
        with _LOCK:
            module = _STATE["module"]
            if module is None:   # switched when it loads
                _WAITING.add(self)
        if module is not None:
            self.use(module)

    def use(self, module) -> None:
        self.run = functools.partial(module.check, module.make_specs(self.specs))

    def __reduce__(self):
        return TensorChecks, (self.specs,)


def _python_run(specs: tuple):
    """The same checks in Python (until the extension loads): a loop, slower than the
    inline checks, which entries keep where the extension cannot be built."""
    plain = tuple((cls, dtype, device if device.type != "cpu" else None, requires_grad, shape, stride)
                  for cls, dtype, device, requires_grad, shape, stride in specs)

    def run(*tensors):
        if len(tensors) != len(plain):
            return False
        for t, (cls, dtype, device, requires_grad, shape, stride) in zip(tensors, plain):
            if not (type(t) is cls and t.dtype is dtype and (t.is_cpu if device is None else t.device == device)
                    and t.shape == shape and t.stride() == stride and t.requires_grad is requires_grad):
                return False
        return True
    return run


class ModuleCalls:
    """The module checks an entry calls as ``surge_native.module_alike(m, cls, forward_in_dict,
    backward_hooks)`` and ``surge_native.no_forward_hooks(m)`` (every entry's namespace holds
    the one ``CALLS``): Python functions until the extension loads, its C functions then.
    A call is about 0.1 us where the inline Python tests of a module take about 0.25 us."""

    @staticmethod
    def module_alike(m, cls, forward_in_dict: bool, backward_hooks: bool) -> bool:
        return (type(m) is cls and ("forward" in m.__dict__) is forward_in_dict
                and bool(m._backward_hooks or m._backward_pre_hooks) is backward_hooks)

    @staticmethod
    def no_forward_hooks(m) -> bool:
        return not (m._forward_hooks or m._forward_pre_hooks)

    def use(self, module) -> None:
        self.module_alike, self.no_forward_hooks = module.module_alike, module.no_forward_hooks


CALLS = ModuleCalls()


def spec_of(value: torch.Tensor) -> tuple | None:
    """What the C++ check compares of a tensor the capture saw; None for a tensor it
    cannot check (a subclass, not strided)."""
    if type(value) not in (torch.Tensor, torch.nn.Parameter) or value.layout is not torch.strided:
        return None
    return (type(value), value.dtype, value.device, value.requires_grad, tuple(value.shape), value.stride())


# ---------------------------------------------------------------- building and loading

_LOCK = threading.Lock()
_WAITING: "weakref.WeakSet[TensorChecks]" = weakref.WeakSet()
# status: "off" (not started), "building", "ready", "unavailable"
_STATE: dict = {"status": "off", "module": None, "thread": None}


def batching() -> bool:
    """Whether new entries check their tensors through ``TensorChecks``."""
    return _STATE["status"] in ("building", "ready")


def start(cache_dir: str, cxx: str | None, enabled: bool = True) -> None:
    """Load the extension, or start building it in a thread; once per process."""
    with _LOCK:
        if _STATE["status"] != "off":
            return
        if not enabled:
            _STATE["status"] = "unavailable"
            return
        _STATE["status"] = "building"
    plan = _build_plan(cache_dir, cxx or "g++")
    if isinstance(plan, str):
        _unavailable(plan)
        return
    if os.path.exists(plan["library"]):
        _load(plan["library"])
        return
    if os.path.exists(plan["failed"]):
        _unavailable(f"an earlier build failed ({plan['failed']})")
        return
    thread = threading.Thread(target=_build_and_load, args=(plan,), name="surge-native-checks", daemon=True)
    _STATE["thread"] = thread
    thread.start()


def wait(timeout: float | None = None) -> str:
    """Wait for a build under way; returns the status."""
    thread = _STATE["thread"]
    if thread is not None:
        thread.join(timeout)
    return _STATE["status"]


def _build_plan(cache_dir: str, cxx: str):
    """Paths and the compiler command, or why the extension cannot be built here."""
    python_include = sysconfig.get_paths().get("include") or ""
    if not os.path.exists(os.path.join(python_include, "Python.h")):
        return f"no Python.h under {python_include!r}"
    torch_dir = os.path.dirname(torch.__file__)
    torch_include, torch_lib = os.path.join(torch_dir, "include"), os.path.join(torch_dir, "lib")
    if not os.path.exists(os.path.join(torch_include, "torch", "csrc", "autograd", "python_variable.h")):
        return f"torch's C++ headers are not installed under {torch_include!r}"
    flags = ["-O2", "-shared", "-fPIC", "-std=c++17", "-w",
             f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
             f"-I{torch_include}", f"-I{os.path.join(torch_include, 'torch', 'csrc', 'api', 'include')}",
             f"-I{python_include}", f"-L{torch_lib}", f"-Wl,-rpath,{torch_lib}",
             "-ltorch_python", "-ltorch", "-ltorch_cpu", "-lc10"]
    key = hashlib.sha256("\n".join([SOURCE, cxx, torch.__version__, torch_dir, sys.version, *flags])
                         .encode()).hexdigest()[:20]
    folder = os.path.join(cache_dir, "native")
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return dict(cxx=cxx, flags=flags, folder=folder, library=os.path.join(folder, f"{MODULE_NAME}-{key}{suffix}"),
                failed=os.path.join(folder, f"{MODULE_NAME}-{key}.failed"))


def _build_and_load(plan: dict) -> None:
    os.makedirs(plan["folder"], exist_ok=True)
    with tempfile.TemporaryDirectory(dir=plan["folder"]) as work:
        source = os.path.join(work, "tensor_checks.cpp")
        with open(source, "w") as f:
            f.write(SOURCE)
        built = os.path.join(work, os.path.basename(plan["library"]))
        try:
            done = subprocess.run([plan["cxx"], source, "-o", built, *plan["flags"]], capture_output=True,
                                  text=True, timeout=BUILD_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as error:
            _unavailable(f"{plan['cxx']} did not run: {error}")
            return
        if done.returncode != 0:
            with open(plan["failed"], "w") as f:
                f.write(done.stderr[-4000:])
            _unavailable(f"{plan['cxx']} failed: {done.stderr.strip().splitlines()[-1:]}")
            return
        os.replace(built, plan["library"])   # never over a file another process may have mapped
    _load(plan["library"])


def _load(path: str) -> None:
    try:
        spec = importlib.util.spec_from_file_location(MODULE_NAME, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as error:  # a library from another build of torch, say
        _unavailable(f"{path} did not load: {type(error).__name__}: {error}")
        return
    CALLS.use(module)
    with _LOCK:
        _STATE["module"], _STATE["status"] = module, "ready"
        waiting = list(_WAITING)
        _WAITING.clear()
    for checks in waiting:
        checks.use(module)
    logs.log("perf", f"tensor checks run in C++ ({path})")


def _unavailable(why: str) -> None:
    _STATE["status"] = "unavailable"
    logs.log("perf", f"tensor checks stay in Python: {why}")
