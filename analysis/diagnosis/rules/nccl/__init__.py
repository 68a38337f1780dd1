"""The NET rule family: NCCL debug logs checked against what the hardware allows."""

from __future__ import annotations

from analysis.diagnosis.rules.nccl.outcome import FailureRootCause, ForcedSettings, MeasuredBandwidth
from analysis.diagnosis.rules.nccl.topology import IntraNodePath, RailMisuse
from analysis.diagnosis.rules.nccl.transport import GdrOff, SocketBetweenNodes

NET_RULES = (SocketBetweenNodes, GdrOff, RailMisuse, IntraNodePath, ForcedSettings, FailureRootCause,
             MeasuredBandwidth)

__all__ = ["NET_RULES"]
