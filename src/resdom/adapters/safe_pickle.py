"""A restricted reader for ``torch.save`` files: tensors, plain containers and inert stand-ins, nothing else.

Unpickling calls whatever callables the file names; a checkpoint from elsewhere is untrusted input. This
module never lets the file name a real callable except a short list of data constructors:

- ``torch._utils._rebuild_tensor_v2`` / ``_rebuild_parameter`` are replaced by our own functions that
  cut the tensor out of the storage bytes we read ourselves from the zip archive (``persistent_load``);
- ``torch.*Storage`` names only select a dtype; ``torch.device`` becomes its string, ``torch.Size`` a tuple of at
  most ``limits.PICKLE_DIMS`` whole numbers (given as a tuple or list);
- ``collections.OrderedDict``, ``builtins`` containers (set, frozenset, slice, complex), numpy
  arrays, scalars and non-object dtypes (data only), ``_codecs.encode`` for latin-1 bytes only (protocol 2);
- globals under the caller's ``stand_in_prefixes`` (e.g. ``"recbole."``: RecBole's ``Config``, its enums, its
  model class) become ``Inert`` classes whose instances only collect their constructor arguments and state.

Everything else is refused with a ResdomError that names the global (``module.name``). RecBole (or any
other package named in the file) is never imported. No callable takes a size to allocate (``bytearray(N)`` is
refused: a 318-byte file would take gigabytes); a tensor's storage must be present in the archive with the bytes
its shape needs, and every record is read through ``resdom.bounded`` (bounded, damage as a ResdomError).
"""

from __future__ import annotations

import _compat_pickle
import io
import pickle
import sys
import zipfile
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from resdom.bounded import open_zip, read_member, refuse_special
from resdom.errors import ResdomError
from resdom.limits import PICKLE_DIMS, short

STORAGE_DTYPES: dict[str, torch.dtype] = {
    "DoubleStorage": torch.float64, "FloatStorage": torch.float32, "HalfStorage": torch.float16,
    "BFloat16Storage": torch.bfloat16, "LongStorage": torch.int64, "IntStorage": torch.int32,
    "ShortStorage": torch.int16, "CharStorage": torch.int8, "ByteStorage": torch.uint8,
    "BoolStorage": torch.bool, "ComplexFloatStorage": torch.complex64, "ComplexDoubleStorage": torch.complex128,
}


class Inert:
    """Stand-in for a class named in a pickle: keeps ``args`` (constructor / reduce arguments) and ``state``.

    ``qualname`` is the ``module.name`` the file asked for. Nothing of the original class runs.
    """

    qualname = "?"
    args: tuple[Any, ...] = ()  # also when pickle's NEWOBJ makes the instance with cls.__new__ (no __init__)
    state: Any = None

    def __init__(self, *args: Any) -> None:
        self.args = args
        self.state: Any = None

    def __setstate__(self, state: Any) -> None:
        self.state = state

    @property
    def value(self) -> Any:
        """The single constructor argument (an enum member's value), or None."""
        return self.args[0] if len(self.args) == 1 else None

    def __repr__(self) -> str:
        return f"<inert {self.qualname} args={self.args!r}>"


def make_stand_in(qualname: str) -> type[Inert]:
    """A fresh ``Inert`` subclass that records ``qualname`` (``module.Name``)."""
    return type(qualname.rsplit(".", 1)[-1], (Inert,), {"qualname": qualname, "__module__": __name__})


class _Global:
    """A whitelisted callable handed to the unpickler; refuses pickle's BUILD (no attribute writes on it)."""

    __slots__ = ("fn", "name")

    def __init__(self, fn: Callable[..., Any], name: str) -> None:
        self.fn, self.name = fn, name

    def __call__(self, *args: Any) -> Any:
        try:
            return self.fn(*args)
        except ResdomError:
            raise
        except Exception as e:  # a malformed argument list: data error, not a crash
            raise ResdomError(f"{self.name}: bad arguments in the pickle ({type(e).__name__}: {short(str(e))})"
                              ) from None

    def __setstate__(self, state: Any) -> None:
        raise ResdomError(f"refused: the pickle tries to set state on {self.name}")


def _storage_dtype(storage_type: Any) -> torch.dtype:
    if isinstance(storage_type, _StorageType):
        return storage_type.dtype
    raise ResdomError(f"refused: persistent storage of unknown type {storage_type!r}")


class _StorageType:
    """What a ``torch.FloatStorage`` (etc.) global resolves to: only its dtype."""

    __slots__ = ("dtype",)

    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype

    def __setstate__(self, state: Any) -> None:
        raise ResdomError("refused: the pickle tries to set state on a storage type")


def _tensor_view(storage: torch.Tensor, offset: int, size: Iterable[int], stride: Iterable[int]) -> torch.Tensor:
    """``storage`` (flat, typed) viewed with (offset, size, stride), without a copy, after checking the record.

    Refused: a view with more elements than its storage (e.g. stride 0 over one stored value, which would make
    a tiny file expand to gigabytes when copied) and any (offset, stride) that reads outside the storage."""
    if not isinstance(storage, torch.Tensor):
        raise ResdomError("refused: a tensor whose storage is not a stored tensor record")
    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    offset = int(offset)
    if len(size) != len(stride) or offset < 0 or any(s < 0 for s in size) or any(s < 0 for s in stride):
        raise ResdomError(f"malformed tensor record (size {size[:8]}, stride {stride[:8]}, offset {offset})")
    numel = 1
    for n in size:
        numel *= n
    if numel > storage.numel():
        raise ResdomError(f"malformed tensor record: a view of {numel} elements on a storage of {storage.numel()} "
                          f"(size {size[:8]}, stride {stride[:8]})")
    if numel:
        last = offset + sum((n - 1) * s for n, s in zip(size, stride))
        if last >= storage.numel():
            raise ResdomError(f"malformed tensor record: reads past its storage ({last} >= {storage.numel()})")
    elif offset > storage.numel():
        raise ResdomError(f"malformed tensor record: offset {offset} past its storage of {storage.numel()}")
    return storage.as_strided(size, stride, offset)


def _rebuild_tensor(storage: torch.Tensor, offset: int, size: Iterable[int], stride: Iterable[int], *_: Any
                    ) -> torch.Tensor:
    """Our ``_rebuild_tensor_v2``: a copy of the checked view ``_tensor_view(storage, offset, size, stride)``."""
    return _tensor_view(storage, offset, size, stride).clone()


def _rebuild_parameter(data: Any, *_: Any) -> torch.Tensor:
    if not isinstance(data, torch.Tensor):
        raise ResdomError("refused: a parameter whose data is not a tensor")
    return data


def _numpy_globals() -> dict[str, Callable[..., Any]]:
    out: dict[str, Callable[..., Any]] = {}
    for core in ("numpy.core.multiarray", "numpy._core.multiarray"):
        out[f"{core}._reconstruct"] = _np_reconstruct
        out[f"{core}.scalar"] = _np_scalar
    out["numpy.ndarray"] = _np_reconstruct
    out["numpy.dtype"] = _np_dtype
    return out


def _np_reconstruct(*_: Any) -> np.ndarray:
    # pickle then BUILDs the array state (shape, dtype, data bytes) through ndarray.__setstate__ (data only)
    return np.ndarray.__new__(np.ndarray, (0,), np.uint8)


def _np_dtype(spec: Any, *_: Any) -> np.dtype:
    if not isinstance(spec, str):
        raise ResdomError(f"refused: numpy dtype spec {spec!r}")
    dt = np.dtype(spec)
    if dt.hasobject:
        raise ResdomError("refused: numpy object dtype")
    return dt


def _np_dtype_or_object(spec: Any, *_: Any) -> np.dtype:
    """``numpy.dtype`` that also allows ``"O"`` (object arrays of ids): only with ``object_arrays``."""
    if isinstance(spec, str) and spec in ("O", "O8", "O4"):
        return np.dtype(object)
    return _np_dtype(spec)


def _np_scalar(dtype: Any, data: Any = b"") -> Any:
    if not isinstance(dtype, np.dtype) or dtype.hasobject or not isinstance(data, bytes):
        raise ResdomError(f"refused: numpy scalar of dtype {dtype!r}")
    return np.frombuffer(data, dtype=dtype, count=1)[0]


def _torch_size(dims: Any = ()) -> tuple[int, ...]:
    """``torch.Size(dims)``: a tuple of at most ``PICKLE_DIMS`` whole numbers >= 0, given as a tuple or list
    (never an iterable the file built, such as a long bytes object)."""
    if not isinstance(dims, (tuple, list)) or len(dims) > PICKLE_DIMS.value:
        raise ResdomError(f"refused: torch.Size of {type(dims).__name__} with "
                          f"{len(dims) if hasattr(dims, '__len__') else '?'} dimensions (at most {PICKLE_DIMS.value})")
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in dims):
        raise ResdomError(f"refused: torch.Size{short(tuple(dims), 80)} (dimensions are whole numbers >= 0)")
    return tuple(dims)


def _latin1_bytes(text: Any, encoding: Any = "latin1") -> bytes:
    """``_codecs.encode(text, "latin1")``: how protocol-2 pickles write bytes (numpy arrays in torch.save)."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise ResdomError(f"refused: _codecs.encode with {type(text).__name__} / {encoding!r}")
    return text.encode("latin1")


BASE_GLOBALS: dict[str, Callable[..., Any]] = {
    "_codecs.encode": _latin1_bytes,
    "torch._utils._rebuild_tensor_v2": _rebuild_tensor,
    "torch._utils._rebuild_tensor": _rebuild_tensor,
    "torch._utils._rebuild_parameter": _rebuild_parameter,
    "torch.device": lambda *a: ":".join(str(x) for x in a),
    "torch.Size": _torch_size,
    "collections.OrderedDict": OrderedDict,
    "builtins.set": set,
    "builtins.frozenset": frozenset,
    "builtins.slice": slice,
    "builtins.complex": complex,
    **_numpy_globals(),
}


_BUILDABLE = (Inert, OrderedDict, np.ndarray, np.dtype)


# the library a global names, for the refusal: the importer that reads that library's files
_IMPORTERS = (("recbole.", "; it is a RecBole checkpoint: `resdom import-recbole` reads it"),
              ("rectools.", "; it is a RecTools model: `resdom import-rectools` reads it"))


class RestrictedUnpickler(pickle._Unpickler):
    """A pickle unpickler whose ``find_class`` allows only ``BASE_GLOBALS``, storage types and inert stand-ins.

    It is Python's own pure-Python ``Unpickler`` (so that every opcode can be checked) with one more rule:
    BUILD (pickle's "set this object's state") applies only to inert stand-ins, ``OrderedDict`` (a state
    dict's ``_metadata``) and numpy arrays / dtypes, never to a tensor or a whitelisted callable.

    ``storages``: reads one storage record's bytes by key (``archive/data/<key>``), given the bytes left in the
    budget (None: no limit), which it may refuse to read past; None refuses any persistent reference.
    ``stand_in_prefixes``: globals whose ``module.name`` starts with one of these (e.g. ``"recbole."``)
    become ``Inert`` classes (one per name), whatever they are in the real package.
    ``byte_budget``: the most bytes of storage records read plus tensors built (each storage is read once,
    however often the pickle names it); past it the file is refused (a crafted file that expands to far more
    memory than its size). None: no limit.
    """

    stack: list[Any]  # pickle._Unpickler's own (load sets it), which typeshed leaves out

    def __init__(self, file: io.BytesIO, storages: Callable[[str, int | None], bytes | bytearray] | None = None,
                 stand_in_prefixes: Iterable[str] = (), source: str = "pickle", object_arrays: bool = False,
                 byte_budget: int | None = None) -> None:
        super().__init__(file)
        self._budget = byte_budget
        self._read: dict[str, bytearray] = {}
        self._object_arrays = object_arrays
        self._storages = storages
        self._prefixes = tuple(stand_in_prefixes)
        self._stand_ins: dict[str, type[Inert]] = {}
        self._source = source

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _compat_pickle.NAME_MAPPING:  # Python 2 names in protocol < 3 (torch.save's default)
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        qualname = f"{module}.{name}"
        if self._prefixes and qualname.startswith(self._prefixes):
            return self._stand_ins.setdefault(qualname, make_stand_in(qualname))
        if qualname == "numpy.dtype" and self._object_arrays:
            return _Global(_np_dtype_or_object, qualname)
        if qualname in BASE_GLOBALS:
            fn = self._rebuild_counted if BASE_GLOBALS[qualname] is _rebuild_tensor else BASE_GLOBALS[qualname]
            return _Global(fn, qualname)
        if module == "torch" and name in STORAGE_DTYPES:
            return _StorageType(STORAGE_DTYPES[name])
        library = next((hint for prefix, hint in _IMPORTERS if qualname.startswith(prefix)), "")
        raise ResdomError(
            f"{self._source}: refused to load: it needs the global {qualname!r}, which is not a tensor, a plain "
            f"container or a known inert class (resdom never runs code from a checkpoint){library}"
        )

    def charge(self, n_bytes: int, what: str) -> None:
        """Count ``n_bytes`` against the byte budget; refuse the file once it is spent."""
        if self._budget is None:
            return
        self._budget -= n_bytes
        if self._budget < 0:
            raise ResdomError(f"{self._source}: refused: its tensors would take far more memory than the file's size "
                              f"({what} of {n_bytes} bytes goes past the limit); a crafted or corrupt checkpoint")

    def _rebuild_counted(self, storage: torch.Tensor, offset: int, size: Iterable[int], stride: Iterable[int],
                         *_: Any) -> torch.Tensor:
        view = _tensor_view(storage, offset, size, stride)
        self.charge(view.numel() * view.element_size(), "a tensor")
        return view.clone()

    dispatch = dict(pickle._Unpickler.dispatch)

    def load_build(self) -> None:
        inst = self.stack[-2] if len(self.stack) >= 2 else None
        if not isinstance(inst, _BUILDABLE):
            raise ResdomError(f"{self._source}: refused: the pickle sets state on a {type(inst).__name__}")
        if isinstance(inst, np.ndarray):  # an object array's elements must come as a list of unpickled objects
            state = self.stack[-1]
            if not (isinstance(state, tuple) and len(state) == 5 and isinstance(state[2], np.dtype)):
                raise ResdomError(f"{self._source}: refused: malformed numpy array state")
            if state[2].hasobject and not (isinstance(state[4], list) and all(
                    isinstance(x, (str, int, float, bool, type(None))) for x in state[4])):
                raise ResdomError(f"{self._source}: refused: a numpy object array of anything but str / int / float")
            shape = state[1]
            if not (isinstance(shape, tuple) and len(shape) <= PICKLE_DIMS.value
                    and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)):
                raise ResdomError(f"{self._source}: refused: numpy array shape {short(shape, 80)}")
            count = 1
            for n in shape:
                count *= n
            held = len(state[4]) if state[2].hasobject else len(state[4]) // max(state[2].itemsize, 1) \
                if isinstance(state[4], (bytes, bytearray)) else -1
            if count != held:  # numpy would allocate the shape first (an object array: 8 bytes an element)
                raise ResdomError(f"{self._source}: refused: a numpy array of shape {short(shape, 80)} whose data "
                                  f"holds {held} elements")
        pickle._Unpickler.load_build(self)  # type: ignore[attr-defined]  # typeshed omits the opcode methods

    # typeshed types this pure-Python table's entries as taking the C Unpickler; they take a _Unpickler
    dispatch[pickle.BUILD[0]] = load_build  # type: ignore[assignment]

    def persistent_load(self, pid: Any) -> Any:
        if self._storages is None or not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise ResdomError(f"{self._source}: refused persistent reference {short(str(pid), 80)}")
        _, storage_type, key, _location, numel = pid
        dtype = _storage_dtype(storage_type)
        if not isinstance(key, (str, int)) or isinstance(key, bool) or len(str(key)) > 64:
            raise ResdomError(f"{self._source}: refused: storage key {short(key, 80)}")
        key = str(key)
        if key not in self._read:  # read each record once (torch.save names a shared storage once per view)
            raw_bytes = self._storages(key, self._budget)
            self._read[key] = raw_bytes if isinstance(raw_bytes, bytearray) else bytearray(raw_bytes)
            self.charge(len(self._read[key]), f"storage record {key}")
        raw = self._read[key]
        itemsize = torch.empty((), dtype=dtype).element_size()
        if not isinstance(numel, int) or isinstance(numel, bool) or numel < 0:
            raise ResdomError(f"{self._source}: storage record {key}: malformed size {short(numel, 80)}")
        if len(raw) % itemsize or numel * itemsize > len(raw):
            raise ResdomError(f"{self._source}: storage record {key} has {len(raw)} bytes, not {numel} x {itemsize} "
                              "(a truncated or crafted checkpoint)")
        if not raw:
            return torch.empty(0, dtype=dtype)
        return torch.frombuffer(raw, dtype=dtype)


def load_torch_file(path: str | Path, stand_in_prefixes: Iterable[str] = ()) -> Any:
    """Read a ``torch.save`` zip file with ``RestrictedUnpickler``; returns the unpickled object.

    Raises ResdomError for a file that is not a torch zip checkpoint, that needs a global outside the
    whitelist, or whose tensor records are malformed. Never imports or calls anything the file names.
    """
    path = Path(path)
    refuse_special(path)
    if not path.is_file():
        raise ResdomError(f"{path}: file not found")
    try:
        is_zip = zipfile.is_zipfile(path)
    except zipfile.BadZipFile as e:  # is_zipfile lets some damaged end records through (a multi-disk zip64 one)
        raise ResdomError(f"{path}: not a readable zip file ({type(e).__name__}: {short(str(e))})") from None
    if not is_zip:
        raise ResdomError(f"{path}: not a torch zip checkpoint (saved with torch < 1.6 or not by torch.save)")
    with open_zip(path) as z:
        return _load_archive(z, stand_in_prefixes, str(path), byte_budget=memory_budget(path.stat().st_size))


def load_torch_bytes(data: bytes, stand_in_prefixes: Iterable[str] = (), source: str = "checkpoint",
                     object_arrays: bool = False) -> Any:
    """``load_torch_file`` for the bytes of a ``torch.save`` zip archive held in memory (e.g. inside a pickle).

    ``object_arrays``: also accept numpy object arrays whose elements are str / int / float / None (RecTools keeps
    its external item ids so); the elements themselves are unpickled under the same whitelist."""
    if not isinstance(data, (bytes, bytearray)) or data[:4] != b"PK\x03\x04":
        raise ResdomError(f"{source}: not a torch zip checkpoint")
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, NotImplementedError) as e:
        raise ResdomError(f"{source}: not a torch zip checkpoint ({type(e).__name__}: {short(str(e))})") from None
    with archive as z:
        return _load_archive(z, stand_in_prefixes, source, object_arrays, memory_budget(len(data)))


def memory_budget(file_size: int) -> int:
    """The most bytes (storage records read + tensors built) a checkpoint of ``file_size`` bytes may load into.

    ``torch.save`` stores records uncompressed, so an honest file's storages take at most its size, and its
    tensors about as much again (more where views share a storage, e.g. tied weights): 4x the size + 1 MiB."""
    return 4 * int(file_size) + (1 << 20)


def _load_archive(z: zipfile.ZipFile, stand_in_prefixes: Iterable[str], path: str, object_arrays: bool = False,
                  byte_budget: int | None = None) -> Any:
    """Unpickle the ``<name>/data.pkl`` record of an open torch zip archive with ``RestrictedUnpickler``.

    ``byte_budget``: see ``RestrictedUnpickler``; also caps the (declared, uncompressed) size of each record read."""
    names = z.namelist()
    pkl = [n for n in names if n.endswith("data.pkl") and n.count("/") == 1]
    if len(pkl) != 1:
        raise ResdomError(f"{path}: not a torch zip checkpoint (no single <name>/data.pkl record)")
    prefix = pkl[0][: -len("data.pkl")]
    order = "little"
    if prefix + "byteorder" in names:
        raw_order = read_member(z, prefix + "byteorder", path, 64)
        order = raw_order.decode("ascii", errors="replace").strip()
        if order not in ("little", "big"):
            raise ResdomError(f"{path}: record {prefix}byteorder holds {short(raw_order, 40)}, not 'little' or 'big'")
    if order != sys.byteorder:
        raise ResdomError(f"{path}: saved on a {order}-endian machine; this one is {sys.byteorder}-endian")

    def read(record: str, budget: int | None) -> bytearray:
        size = z.getinfo(record).file_size  # zipfile never returns more than the declared size
        if budget is not None and size > budget:
            raise ResdomError(f"{path}: refused: record {record} unpacks to {size} bytes, far more than the file's "
                              "size (a crafted or corrupt checkpoint)")
        return read_member(z, record, path, budget)

    def storage(key: str, budget: int | None) -> bytearray:
        record = f"{prefix}data/{key}"
        if record not in names:
            raise ResdomError(f"{path}: storage record {record} missing")
        return read(record, budget)

    unpickler = RestrictedUnpickler(io.BytesIO(read(pkl[0], byte_budget)), storage, stand_in_prefixes, str(path),
                                    object_arrays, byte_budget)
    try:
        return unpickler.load()
    except ResdomError as e:
        raise _naming(e, path) from None
    except Exception as e:
        raise ResdomError(f"{path}: malformed pickle ({type(e).__name__}: {short(str(e))})") from None


def _naming(e: ResdomError, source: str) -> ResdomError:
    """``e`` naming the file it is about (the unpickler's refusals say what, not where: "refused: numpy object
    dtype")."""
    return e if str(e).startswith(f"{source}:") else ResdomError(f"{source}: {e}")


def loads_restricted(data: bytes, stand_in_prefixes: Iterable[str] = (), source: str = "pickle") -> Any:
    """Unpickle plain ``data`` (no storages) with the same whitelist as ``load_torch_file``."""
    try:
        return RestrictedUnpickler(io.BytesIO(data), None, stand_in_prefixes, source).load()
    except ResdomError as e:
        raise _naming(e, source) from None
    except Exception as e:
        raise ResdomError(f"{source}: malformed pickle ({type(e).__name__}: {short(str(e))})") from None
