"""ctypes access to a compiled training step (runtime/tcc_step.h).

    step = Step("step.so")
    step.init()                       # initial params, zeroed grads
    step.set_input("idx", array)      # graph inputs, at their arena offsets
    step.micro_step(1.0)              # forward + backward, grads += scale*grad
    step.output(0), step.grad("w")    # numpy views into the arena

`step.info` describes the step: `params`, `grads`, `inputs`, `outputs` are
lists of TensorDesc(name, dtype, shape, offset, bytes). The views returned by
`param`, `grad`, `input`, `output` alias the arena: writing a param view
changes the parameter the next micro_step uses.
"""
import ctypes
import collections

import numpy as np

ABI_VERSION = 1

# enum tcc_dtype (ONNX TensorProto.DataType numbering) -> numpy dtype
DTYPES = {
    1: np.float32,
    2: np.uint8,
    3: np.int8,
    6: np.int32,
    7: np.int64,
    9: np.bool_,
    10: np.float16,
    11: np.float64,
}

ALIGN = 64

TensorDesc = collections.namedtuple("TensorDesc", "name dtype shape offset bytes")
StepInfo = collections.namedtuple(
    "StepInfo", "abi_version model target arena_bytes has_backward "
                "params grads inputs outputs")


class _CDesc(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p),
                ("dtype", ctypes.c_int32),
                ("rank", ctypes.c_int32),
                ("dims", ctypes.POINTER(ctypes.c_int64)),
                ("offset", ctypes.c_uint64),
                ("bytes", ctypes.c_uint64)]


class _CInfo(ctypes.Structure):
    _fields_ = [("abi_version", ctypes.c_uint32),
                ("model", ctypes.c_char_p),
                ("target", ctypes.c_char_p),
                ("arena_bytes", ctypes.c_uint64),
                ("has_backward", ctypes.c_int32),
                ("num_params", ctypes.c_int32),
                ("params", ctypes.POINTER(_CDesc)),
                ("grads", ctypes.POINTER(_CDesc)),
                ("num_inputs", ctypes.c_int32),
                ("inputs", ctypes.POINTER(_CDesc)),
                ("num_outputs", ctypes.c_int32),
                ("outputs", ctypes.POINTER(_CDesc))]


def _descs(ptr, n):
    out = []
    for i in range(n):
        d = ptr[i]
        shape = tuple(int(d.dims[k]) for k in range(d.rank))
        out.append(TensorDesc(d.name.decode() if d.name else "", int(d.dtype), shape,
                              int(d.offset), int(d.bytes)))
    return out


class StepError(RuntimeError):
    pass


class Step:
    def __init__(self, path):
        self.path = path
        self.lib = ctypes.CDLL(path)
        self.lib.tcc_step_get_info.restype = ctypes.POINTER(_CInfo)
        self.lib.tcc_step_get_info.argtypes = []
        for fn in ("tcc_step_init", "tcc_step_zero_grads"):
            getattr(self.lib, fn).restype = ctypes.c_int
            getattr(self.lib, fn).argtypes = [ctypes.c_void_p]
        self.lib.tcc_step_micro_step.restype = ctypes.c_int
        self.lib.tcc_step_micro_step.argtypes = [ctypes.c_void_p, ctypes.c_double]

        ci = self.lib.tcc_step_get_info().contents
        if ci.abi_version != ABI_VERSION:
            raise StepError("%s: abi_version %d, expected %d"
                            % (path, ci.abi_version, ABI_VERSION))
        self.info = StepInfo(
            abi_version=int(ci.abi_version),
            model=ci.model.decode() if ci.model else "",
            target=ci.target.decode() if ci.target else "",
            arena_bytes=int(ci.arena_bytes),
            has_backward=int(ci.has_backward),
            params=_descs(ci.params, ci.num_params),
            grads=_descs(ci.grads, ci.num_params),
            inputs=_descs(ci.inputs, ci.num_inputs),
            outputs=_descs(ci.outputs, ci.num_outputs))
        self.arena = self._alloc(self.info.arena_bytes)
        self._ptr = ctypes.c_void_p(self.arena.ctypes.data)

    @staticmethod
    def _alloc(nbytes):
        raw = np.zeros(nbytes + ALIGN, dtype=np.uint8)
        start = (-raw.ctypes.data) % ALIGN
        arena = raw[start:start + nbytes]
        assert arena.ctypes.data % ALIGN == 0
        return arena

    # -- calls ---------------------------------------------------------------
    def _check(self, fn, rc):
        if rc != 0:
            raise StepError("%s returned %d" % (fn, rc))

    def init(self):
        self._check("tcc_step_init", self.lib.tcc_step_init(self._ptr))

    def zero_grads(self):
        self._check("tcc_step_zero_grads", self.lib.tcc_step_zero_grads(self._ptr))

    def micro_step(self, scale=1.0):
        self._check("tcc_step_micro_step",
                    self.lib.tcc_step_micro_step(self._ptr, float(scale)))

    # -- views ---------------------------------------------------------------
    def view(self, desc):
        dt = np.dtype(DTYPES[desc.dtype])
        n = int(np.prod(desc.shape, dtype=np.int64))
        if desc.bytes == 0:
            return None
        if n * dt.itemsize != desc.bytes:
            raise StepError("%s: %d bytes for shape %s of %s"
                            % (desc.name, desc.bytes, desc.shape, dt))
        return self.arena[desc.offset:desc.offset + desc.bytes].view(dt).reshape(desc.shape)

    @staticmethod
    def _find(descs, key, what):
        if isinstance(key, int):
            return descs[key]
        for d in descs:
            if d.name == key:
                return d
        raise KeyError("no %s named %r (have %s)" % (what, key, [d.name for d in descs]))

    def param(self, key):
        return self.view(self._find(self.info.params, key, "param"))

    def grad(self, key):
        """The accumulator of param `key` (None for a frozen parameter)."""
        if isinstance(key, str):
            key = [d.name for d in self.info.params].index(key)
        return self.view(self.info.grads[key])

    def input(self, key):
        return self.view(self._find(self.info.inputs, key, "input"))

    def output(self, key=0):
        return self.view(self._find(self.info.outputs, key, "output"))

    def set_input(self, key, value):
        v = self.input(key)
        value = np.asarray(value)
        if value.shape != v.shape:
            raise StepError("input %s: shape %s, expected %s" % (key, value.shape, v.shape))
        v[...] = value.astype(v.dtype)

    def loss(self):
        return float(self.output(0).reshape(-1)[0])
