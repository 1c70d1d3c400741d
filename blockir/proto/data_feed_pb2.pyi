from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Slot(_message.Message):
    __slots__ = ("name", "type", "is_dense", "is_used", "shape")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    IS_DENSE_FIELD_NUMBER: _ClassVar[int]
    IS_USED_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: str
    is_dense: bool
    is_used: bool
    shape: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, name: _Optional[str] = ..., type: _Optional[str] = ..., is_dense: _Optional[bool] = ..., is_used: _Optional[bool] = ..., shape: _Optional[_Iterable[int]] = ...) -> None: ...

class MultiSlotDesc(_message.Message):
    __slots__ = ("slots",)
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    slots: _containers.RepeatedCompositeFieldContainer[Slot]
    def __init__(self, slots: _Optional[_Iterable[_Union[Slot, _Mapping]]] = ...) -> None: ...

class DataFeedDesc(_message.Message):
    __slots__ = ("name", "batch_size", "multi_slot_desc", "pipe_command", "thread_num")
    NAME_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    MULTI_SLOT_DESC_FIELD_NUMBER: _ClassVar[int]
    PIPE_COMMAND_FIELD_NUMBER: _ClassVar[int]
    THREAD_NUM_FIELD_NUMBER: _ClassVar[int]
    name: str
    batch_size: int
    multi_slot_desc: MultiSlotDesc
    pipe_command: str
    thread_num: int
    def __init__(self, name: _Optional[str] = ..., batch_size: _Optional[int] = ..., multi_slot_desc: _Optional[_Union[MultiSlotDesc, _Mapping]] = ..., pipe_command: _Optional[str] = ..., thread_num: _Optional[int] = ...) -> None: ...
