"""Export a schedule as an MLCommons Chakra execution trace (``schedsim export chakra SCHEDULE --out DIR``), the
input of ASTRA-sim.

The format (MLCommons Chakra, ``schema/protobuf/et_def.proto``, package ``ChakraProtoMsg``; its Python tools'
``protolib.encodeMessage``): one file per rank, ``DIR/<name>.<rank>.et``, holding a ``GlobalMetadata`` message
and then one ``Node`` message per op, each preceded by its length as a base-128 varint (protobuf's
length-delimited framing). ASTRA-sim's feeder reads ``<prefix>.<npu>.et`` for each NPU.

The schema is built here, in Python, as a ``FileDescriptorProto`` (:func:`descriptors`) holding the messages and
enums the export writes, with the field names, numbers and types of ``et_def.proto``: ``AttributeProto`` (its
scalar ``value`` cases), ``GlobalMetadata``, ``IOInfo``, ``Node``, ``NodeType``, ``CollectiveCommType``. The
messages are made from it by the ``protobuf`` package's ``descriptor_pool`` and ``message_factory``, so nothing
is compiled or fetched at run time; ``protobuf`` is an optional dependency (``pip install 'schedsim[chakra]'``).
Fields of ``et_def.proto`` the export does not write (the list value cases of ``AttributeProto``, ``Tensor``,
``StorageInfo``) are left out of the descriptors; a parser with the full schema reads the files the same.

What each op becomes (one node per op instance, ``id`` its position on its rank, ``name`` its schedsim id):

* ``matmul``, ``compute``, ``memcpy``: ``COMP_NODE`` with ``duration_micros`` the op's time in the simulation of
  the schedule (its recorded duration for an imported one; the profile's model otherwise), ``num_ops`` (FLOP) and
  ``tensor_size`` (bytes) where known; a copy stays a compute node (Chakra's memory nodes are loads and stores of
  a remote memory pool, not host↔device copies) with the attribute ``memcpy`` giving its direction;
* collectives: ``COMM_COLL_NODE`` with ``comm_type`` (``CollectiveCommType``) and ``comm_size`` (the op's
  bytes); a group that is not every rank gets ``pg_name``, an id into ``DIR/comm_group.json`` (``{id: [ranks]}``,
  the communicator groups file ASTRA-sim takes);
* ``send`` / ``recv``: ``COMM_SEND_NODE`` / ``COMM_RECV_NODE`` with ``comm_src``, ``comm_dst``, ``comm_size`` and
  ``comm_tag`` (the k-th matched pair from src to dst in NCCL's pairing order, where a ``p2p_batch`` is posted
  at its first member: the sides agree on it);
* every node: ``is_cpu_op`` false, ``start_time_micros`` its simulated start, ``data_deps`` the ops it waits
  for on its rank (the previous op of its stream and its ``deps``).

Times are whole microseconds, as the schema has them (an op under 0.5 µs exports as 0). Host time (``host_us``,
launch costs) has no place in the schema: a replay in ASTRA-sim runs the GPU work only.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from schedsim.errors import SchedsimError
from schedsim.kinds import KINDS

__all__ = ["COLL_TYPES", "NODE_TYPES", "ChakraExport", "descriptors", "export_chakra", "messages", "read_et",
           "write_et"]

#: ``NodeType`` of et_def.proto.
NODE_TYPES = {"INVALID_NODE": 0, "METADATA_NODE": 1, "MEM_LOAD_NODE": 2, "MEM_STORE_NODE": 3, "COMP_NODE": 4,
              "COMM_SEND_NODE": 5, "COMM_RECV_NODE": 6, "COMM_COLL_NODE": 7}
#: ``CollectiveCommType`` of et_def.proto (a collective kind's :attr:`schedsim.kinds.KindInfo.chakra` names it).
COLL_TYPES = {"ALL_REDUCE": 0, "REDUCE": 1, "ALL_GATHER": 2, "GATHER": 3, "SCATTER": 4, "BROADCAST": 5,
              "ALL_TO_ALL": 6, "REDUCE_SCATTER": 7}
#: The ``GlobalMetadata.version`` written (the version Chakra's own generator writes).
VERSION = "0.0.4"

#: ``AttributeProto``'s scalar ``value`` cases: (name, field number, descriptor type name).
_ATTR_VALUES = (("double_val", 3, "DOUBLE"), ("float_val", 5, "FLOAT"), ("int32_val", 7, "INT32"),
                ("int64_val", 9, "INT64"), ("uint32_val", 11, "UINT32"), ("uint64_val", 13, "UINT64"),
                ("sint32_val", 15, "SINT32"), ("sint64_val", 17, "SINT64"), ("fixed32_val", 19, "FIXED32"),
                ("fixed64_val", 21, "FIXED64"), ("sfixed32_val", 23, "SFIXED32"), ("sfixed64_val", 25, "SFIXED64"),
                ("bool_val", 27, "BOOL"), ("string_val", 29, "STRING"), ("bytes_val", 31, "BYTES"))
_FIX = "pip install 'schedsim[chakra]' (the protobuf package)"


def _protobuf() -> Any:
    """The ``google.protobuf`` modules the export needs.

    Raises
    ------
    SchedsimError
        ``protobuf`` is not installed (exit 2, with the install line).
    """
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    except ImportError:
        raise SchedsimError("the Chakra export needs the protobuf package, which is not installed",
                            fix=_FIX) from None
    return descriptor_pb2, descriptor_pool, message_factory


def descriptors() -> Any:
    """The ``FileDescriptorProto`` of the messages and enums the export writes (module docstring)."""
    pb, _pool, _mf = _protobuf()
    F = pb.FieldDescriptorProto
    f = pb.FileDescriptorProto(name="schedsim_chakra_et_def.proto", package="ChakraProtoMsg", syntax="proto3")

    def field(msg: Any, name: str, number: int, ftype: str, label: str = "LABEL_OPTIONAL", type_name: str = "",
              oneof: int | None = None) -> None:
        fd = msg.field.add(name=name, number=number, type=getattr(F, f"TYPE_{ftype}"), label=getattr(F, label))
        if type_name:
            fd.type_name = f".ChakraProtoMsg.{type_name}"
        if oneof is not None:
            fd.oneof_index = oneof

    attr = f.message_type.add(name="AttributeProto")
    field(attr, "name", 1, "STRING")
    field(attr, "doc_string", 2, "STRING")
    attr.oneof_decl.add(name="value")
    for name, number, ftype in _ATTR_VALUES:
        field(attr, name, number, ftype, oneof=0)
    meta = f.message_type.add(name="GlobalMetadata")
    field(meta, "version", 1, "STRING")
    field(meta, "attr", 2, "MESSAGE", "LABEL_REPEATED", "AttributeProto")
    io = f.message_type.add(name="IOInfo")
    for i, name in enumerate(("values", "shapes", "types"), 1):
        field(io, name, i, "STRING")
    node = f.message_type.add(name="Node")
    field(node, "id", 1, "UINT64")
    field(node, "name", 2, "STRING")
    field(node, "type", 3, "ENUM", type_name="NodeType")
    field(node, "ctrl_deps", 4, "UINT64", "LABEL_REPEATED")
    field(node, "data_deps", 5, "UINT64", "LABEL_REPEATED")
    field(node, "start_time_micros", 6, "UINT64")
    field(node, "duration_micros", 7, "UINT64")
    field(node, "inputs", 8, "MESSAGE", type_name="IOInfo")
    field(node, "outputs", 9, "MESSAGE", type_name="IOInfo")
    field(node, "attr", 10, "MESSAGE", "LABEL_REPEATED", "AttributeProto")
    for name, values in (("NodeType", NODE_TYPES), ("CollectiveCommType", {**{
            k.upper(): v for k, v in COLL_TYPES.items()}, "REDUCE_SCATTER_BLOCK": 8, "BARRIER": 9})):
        e = f.enum_type.add(name=name)
        for k, v in sorted(values.items(), key=lambda kv: kv[1]):
            e.value.add(name=k, number=v)
    return f


class _Messages(NamedTuple):
    GlobalMetadata: Any
    Node: Any
    AttributeProto: Any


_CACHE: list[_Messages] = []


def messages() -> _Messages:
    """The message classes (``GlobalMetadata``, ``Node``, ``AttributeProto``) of :func:`descriptors`, made in a
    pool of their own (once per process)."""
    if not _CACHE:
        _pb, descriptor_pool, message_factory = _protobuf()
        pool = descriptor_pool.DescriptorPool()
        pool.Add(descriptors())
        _CACHE.append(_Messages(*(message_factory.GetMessageClass(pool.FindMessageTypeByName(f"ChakraProtoMsg.{n}"))
                                  for n in _Messages._fields)))
    return _CACHE[0]


def _varint(n: int) -> bytes:
    """Base-128 varint of ``n`` ≥ 0 (protobuf's encoding of a length)."""
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def write_et(fh: BinaryIO, meta: Any, nodes: list[Any]) -> None:
    """Write ``meta`` then each of ``nodes``, each length-delimited (module docstring)."""
    for m in (meta, *nodes):
        data = m.SerializeToString()
        fh.write(_varint(len(data)) + data)


def read_et(data: bytes) -> tuple[Any, list[Any]]:
    """Parse a Chakra execution trace (bytes of one ``.et`` file) with :func:`messages`: ``(GlobalMetadata,
    [Node, ...])``.

    Raises
    ------
    SchedsimError
        A length that runs past the end of the data, or a message that does not parse.
    """
    from google.protobuf.message import DecodeError

    msgs = messages()
    out: list[Any] = []
    pos = 0
    while pos < len(data):
        n = shift = 0
        while True:
            if pos >= len(data) or shift > 63:
                raise SchedsimError(f"Chakra trace: truncated length at byte {pos}",
                                    fix="pass a whole .et file written by schedsim export chakra or Chakra's tools")
            b = data[pos]
            pos += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        if pos + n > len(data):
            raise SchedsimError(f"Chakra trace: a message of {n} bytes runs past the end at byte {pos}",
                                fix="pass a whole .et file written by schedsim export chakra or Chakra's tools")
        m = (msgs.GlobalMetadata if not out else msgs.Node)()
        try:
            m.ParseFromString(data[pos:pos + n])
        except DecodeError as e:
            raise SchedsimError(f"Chakra trace: message {len(out)} does not parse ({e})",
                                fix="pass a .et file written by schedsim export chakra or Chakra's tools") from None
        out.append(m)
        pos += n
    if not out:
        raise SchedsimError("Chakra trace: empty", fix="pass a .et file written by schedsim export chakra")
    return out[0], out[1:]


class ChakraExport(NamedTuple):
    """What :func:`export_chakra` wrote: the files (one per rank, then ``comm_group.json`` when written) and the
    node count of each rank."""

    files: list[Path]
    nodes: dict[int, int]


def _us(s: float) -> int:
    """Seconds → whole microseconds (round half up; never below 0)."""
    return max(0, int(s * 1e6 + 0.5))


def _p2p_tags(prog: Any, ops: list[Any]) -> dict[int, int]:
    """Per send/recv op index, its ``comm_tag``: the k-th matched pair from src to dst in the program's pairing
    (``prog.p2p``, NCCL's: a ``p2p_batch`` is posted whole at its first member, so the written order of one side
    is not the pairing order)."""
    tag_of: dict[int, int] = {}
    pairs: dict[tuple[int, int], int] = defaultdict(int)
    for s_i, r_i in prog.p2p.tolist():
        key = (ops[s_i].rank, ops[r_i].rank)
        tag_of[s_i] = tag_of[r_i] = pairs[key]
        pairs[key] += 1
    return tag_of


def export_chakra(run: Any, out: str | Path, *, inputs: list[Path] | None = None) -> ChakraExport:
    """Write the Chakra execution trace of a simulated schedule (module docstring) into the folder ``out``.

    Parameters
    ----------
    run : schedsim.api.Run
        From :func:`schedsim.api.simulate_spec` (its ``program`` and ``timeline``).
    out : path
        Folder; written as one set (:func:`schedsim.outdir.output_set`).
    inputs : list of Path
        Files the output must not replace.

    Returns
    -------
    ChakraExport

    Raises
    ------
    SchedsimError
        ``protobuf`` missing, or ``out`` unusable.
    """
    from schedsim.outdir import output_set, safe_dirname

    msgs = messages()
    prog, tl = run.program, run.timeline
    ops = prog.ops()
    ids = prog.ids()
    at = {sid: i for i, sid in enumerate(tl.columns.id)}
    starts, ends = tl.columns.start_s, tl.columns.end_s
    local: list[int] = [0] * len(ops)  # each op's node id: its position on its rank
    count: dict[int, int] = defaultdict(int)
    for i, op in enumerate(ops):
        local[i] = count[op.rank]
        count[op.rank] += 1
    preds: list[list[int]] = [[] for _ in ops]
    ptr, idx, _kind = prog.succ
    for u in range(len(ops)):
        for v in idx[ptr[u]:ptr[u + 1]].tolist():
            if ops[v].rank == ops[u].rank:
                preds[v].append(local[u])
    groups: dict[tuple[int, ...], str] = {}
    tag_of = _p2p_tags(prog, ops)
    nodes: dict[int, list[Any]] = defaultdict(list)
    world = prog.world_size
    for i, op in enumerate(ops):
        row = at[ids[i]]
        t0, t1 = float(starts[row]), float(ends[row])
        n = msgs.Node(id=local[i], name=ids[i], start_time_micros=_us(t0), duration_micros=_us(t1 - t0),
                      data_deps=sorted(set(preds[i])))
        attr: list[dict[str, Any]] = [{"name": "is_cpu_op", "bool_val": False}]
        info = KINDS[op.kind]  # how Chakra writes the kind: KindInfo.chakra
        if info.chakra in COLL_TYPES:
            n.type = NODE_TYPES["COMM_COLL_NODE"]
            attr += [{"name": "comm_type", "int64_val": COLL_TYPES[info.chakra]},
                     {"name": "comm_size", "uint64_val": int(op.nbytes)}]
            grp = tuple(sorted(op.group)) if op.group else tuple(range(world))
            if grp != tuple(range(world)):
                pg = groups.setdefault(grp, str(len(groups) + 1))
                attr.append({"name": "pg_name", "string_val": pg})
        elif info.chakra in ("COMM_SEND_NODE", "COMM_RECV_NODE"):
            src, dst = (op.rank, op.peer) if info.chakra == "COMM_SEND_NODE" else (op.peer, op.rank)
            tag = tag_of[i]
            n.type = NODE_TYPES[info.chakra]
            attr += [{"name": "comm_src", "int32_val": int(src)}, {"name": "comm_dst", "int32_val": int(dst)},
                     {"name": "comm_size", "uint64_val": int(op.nbytes)}, {"name": "comm_tag", "int32_val": tag}]
        else:
            n.type = NODE_TYPES["COMP_NODE"]
            if op.flops > 0:
                attr.append({"name": "num_ops", "uint64_val": int(op.flops)})
            if op.nbytes > 0:
                attr.append({"name": "tensor_size", "uint64_val": int(op.nbytes)})
            if info.resource == "copy":
                attr.append({"name": "memcpy", "string_val": str(op.direction)})
        for a in attr:
            n.attr.add(**a)
        nodes[op.rank].append(n)
    stem = safe_dirname(tl.schedule or "schedule")
    names = [f"{stem}.{r}.et" for r in range(world)] + (["comm_group.json"] if groups else [])
    outdir = Path(out)
    with output_set(outdir, "export", inputs=inputs or [], expect=names) as stage:
        for r in range(world):
            with open(stage / f"{stem}.{r}.et", "wb") as fh:
                meta = msgs.GlobalMetadata(version=VERSION)
                meta.attr.append(msgs.AttributeProto(name="schedule", string_val=tl.schedule))
                write_et(fh, meta, nodes.get(r, []))
        if groups:
            (stage / "comm_group.json").write_text(json.dumps({v: list(k) for k, v in groups.items()}, indent=1))
    return ChakraExport([outdir / n for n in names], {r: len(nodes.get(r, [])) for r in range(world)})
