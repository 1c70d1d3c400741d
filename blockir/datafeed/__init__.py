"""Data feeding: DataFeedDesc (what a data file holds), the MultiSlot reader of such files, and staged
readers that load batches on a thread and put them on a device ahead of use (:mod:`blockir.datafeed.staged`,
``bir.reader``)."""

from blockir.datafeed.desc import SLOT_TYPES, DataFeedDesc
from blockir.datafeed.multislot import MultiSlotReader, write_multislot

__all__ = ["SLOT_TYPES", "DataFeedDesc", "MultiSlotReader", "write_multislot"]
