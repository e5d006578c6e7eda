"""ctypes access to a compiled training step (runtime/tcc_step.h).

    step = Step("step.so")
    step.init()                       # initial params, zeroed grads
    step.set_input("idx", array)      # graph inputs, at their arena offsets
    step.micro_step(1.0)              # forward + backward, grads += scale*grad
    step.output(0), step.grad("w")    # numpy views into the arena

`step.info` describes the step: `params`, `grads`, `inputs`, `outputs` (and,
from ABI v2, the optimizer's `state`) are lists of
TensorDesc(name, dtype, shape, offset, bytes). ABI v1 and v2 steps load; with
v2, `step.apply(OptimArgs(...))` runs tcc_step_apply. The views returned by
`param`, `grad`, `input`, `output` alias the arena: writing a param view
changes the parameter the next micro_step uses.
"""
import ctypes
import collections

import numpy as np

ABI_VERSIONS = (1, 2, 3, 4, 5, 6, 7, 8, 9)  # layouts of tcc_step_info this module reads
# (v5 added device functions: tcc_step_stage_inputs, tcc_step_micro_step_begin
# and _end; its tcc_step_info is v4's; v7 gives each tensor its location,
# the arena or the host buffer of tcc --offload, and adds host_bytes)

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

TensorDesc = collections.namedtuple("TensorDesc", "name dtype shape offset bytes location",
                                    defaults=(0,))  # location: 0 arena, 1 host buffer (v7)
StepInfo = collections.namedtuple(
    "StepInfo", "abi_version model model_path target arena_bytes has_backward "
                "params grads inputs outputs optimizer state mem_budget ops objective",
    defaults=("",))


class _CDesc(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p),
                ("dtype", ctypes.c_int32),
                ("rank", ctypes.c_int32),
                ("dims", ctypes.POINTER(ctypes.c_int64)),
                ("offset", ctypes.c_uint64),
                ("bytes", ctypes.c_uint64)]


_INFO_V1 = [("abi_version", ctypes.c_uint32),
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


class _CInfoV1(ctypes.Structure):
    _fields_ = _INFO_V1


class _CInfoV2(ctypes.Structure):
    # v2 adds model_path after model, and the optimizer and its state at the end.
    _fields_ = (_INFO_V1[:2] + [("model_path", ctypes.c_char_p)] + _INFO_V1[2:] +
                [("optimizer", ctypes.c_char_p),
                 ("num_state", ctypes.c_int32),
                 ("state", ctypes.POINTER(_CDesc))])


class _CInfoV3(ctypes.Structure):
    # v3 adds the memory budget the plan was made for.
    _fields_ = _CInfoV2._fields_ + [("mem_budget", ctypes.c_uint64)]


class _CInfoV4(ctypes.Structure):
    # v4 adds device_arena (1: a CUDA step whose arena is device memory).
    _fields_ = _CInfoV3._fields_ + [("device_arena", ctypes.c_int32),
                                    ("weights_embedded", ctypes.c_int32)]


class _CInfoV6(ctypes.Structure):
    # v6 adds the op table: what each op that runs code is, and the plan's
    # live arena bytes while it runs (tcc-run --trace).
    _fields_ = _CInfoV4._fields_ + [("num_ops", ctypes.c_int32),
                                    ("ops", ctypes.POINTER(ctypes.c_char_p)),
                                    ("op_live_bytes", ctypes.POINTER(ctypes.c_uint64))]


class _CDescV7(ctypes.Structure):
    _fields_ = _CDesc._fields_ + [("location", ctypes.c_int32)]


def _with_desc(fields, desc):
    return [(n, ctypes.POINTER(desc) if t is ctypes.POINTER(_CDesc) else t) for n, t in fields]


class _CInfoV7(ctypes.Structure):
    # v7 adds each tensor's location and the host buffer's size.
    _fields_ = _with_desc(_CInfoV6._fields_, _CDescV7) + [("host_bytes", ctypes.c_uint64)]


class _CInfoV9(ctypes.Structure):
    # v9 adds the objective: how the loss reads the inputs (tcc-run --data).
    _fields_ = _CInfoV7._fields_ + [("objective", ctypes.c_char_p)]


def read_info(path, lib=None):
    """The tcc_step_info of the step library at `path` (any target), as a
    StepInfo; `ops` is a list of (label, live bytes) (empty before v6)."""
    lib = lib or ctypes.CDLL(path)
    lib.tcc_step_get_info.restype = ctypes.POINTER(ctypes.c_uint32)
    lib.tcc_step_get_info.argtypes = []
    raw = lib.tcc_step_get_info()
    version = int(raw[0])  # abi_version is the first field in every layout
    if version not in ABI_VERSIONS:
        raise StepError("%s: abi_version %d, this module reads %s"
                        % (path, version, ABI_VERSIONS))
    layout = {1: _CInfoV1, 2: _CInfoV2, 3: _CInfoV3, 4: _CInfoV4, 5: _CInfoV4,
              6: _CInfoV6, 7: _CInfoV7, 8: _CInfoV7, 9: _CInfoV9}[version]  # v8: new functions only
    ci = ctypes.cast(raw, ctypes.POINTER(layout)).contents
    dec = lambda s: s.decode() if s else ""  # noqa: E731
    v2 = version >= 2
    ops = []
    if version >= 6:
        ops = [(ci.ops[k].decode(), int(ci.op_live_bytes[k])) for k in range(ci.num_ops)]
    info = StepInfo(
        abi_version=version,
        model=dec(ci.model),
        model_path=dec(ci.model_path) if v2 else "",
        target=dec(ci.target),
        arena_bytes=int(ci.arena_bytes),
        has_backward=int(ci.has_backward),
        params=_descs(ci.params, ci.num_params),
        grads=_descs(ci.grads, ci.num_params),
        inputs=_descs(ci.inputs, ci.num_inputs),
        outputs=_descs(ci.outputs, ci.num_outputs),
        optimizer=dec(ci.optimizer) if v2 else "",
        state=_descs(ci.state, ci.num_state) if v2 else [],
        mem_budget=int(ci.mem_budget) if version >= 3 else 0,
        ops=ops,
        objective=dec(ci.objective) if version >= 9 else "")
    device = version >= 4 and bool(ci.device_arena)
    return info, device


class OptimArgs(ctypes.Structure):
    """tcc_optim_args (ABI v4): the run-time hyperparameters of tcc_step_apply
    (loss_scale, added in v4, stays 0: no scaling)."""
    _fields_ = [("lr", ctypes.c_double),
                ("beta1", ctypes.c_double),
                ("beta2", ctypes.c_double),
                ("eps", ctypes.c_double),
                ("weight_decay", ctypes.c_double),
                ("momentum", ctypes.c_double),
                ("nesterov", ctypes.c_int32),
                ("clip_norm", ctypes.c_double),
                ("step", ctypes.c_int64),
                ("decay", ctypes.POINTER(ctypes.c_uint8)),
                ("grad_norm", ctypes.c_double),
                ("loss_scale", ctypes.c_double)]


def _descs(ptr, n):
    out = []
    for i in range(n):
        d = ptr[i]
        shape = tuple(int(d.dims[k]) for k in range(d.rank))
        out.append(TensorDesc(d.name.decode() if d.name else "", int(d.dtype), shape,
                              int(d.offset), int(d.bytes), int(getattr(d, "location", 0))))
    return out


class StepError(RuntimeError):
    pass


class Step:
    def __init__(self, path):
        self.path = path
        self.lib = ctypes.CDLL(path)
        self.lib.tcc_step_get_info.restype = ctypes.POINTER(ctypes.c_uint32)
        self.lib.tcc_step_get_info.argtypes = []
        for fn in ("tcc_step_init", "tcc_step_zero_grads"):
            getattr(self.lib, fn).restype = ctypes.c_int
            getattr(self.lib, fn).argtypes = [ctypes.c_void_p]
        self.lib.tcc_step_micro_step.restype = ctypes.c_int
        self.lib.tcc_step_micro_step.argtypes = [ctypes.c_void_p, ctypes.c_double]

        self.info, device = read_info(path, self.lib)
        v2 = self.info.abi_version >= 2
        if device:
            raise StepError("%s: a device (CUDA) step; this module drives host arenas only"
                            % path)
        if v2 and hasattr(self.lib, "tcc_step_apply"):
            self.lib.tcc_step_apply.restype = ctypes.c_int
            self.lib.tcc_step_apply.argtypes = [ctypes.c_void_p, ctypes.POINTER(OptimArgs)]
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

    def apply(self, args):
        """tcc_step_apply (ABI v2) with an OptimArgs; returns its status (0, or 2
        for a non-finite gradient norm); args.grad_norm is set on return."""
        if self.info.abi_version < 2:
            raise StepError("tcc_step_apply needs ABI v2")
        rc = self.lib.tcc_step_apply(self._ptr, ctypes.byref(args))
        if rc not in (0, 2):
            raise StepError("tcc_step_apply returned %d" % rc)
        return rc

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

    def state(self, key):
        return self.view(self._find(self.info.state, key, "state tensor"))

    def loss(self):
        return float(self.output(0).reshape(-1)[0])
