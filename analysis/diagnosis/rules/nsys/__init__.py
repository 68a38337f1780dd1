"""Rules over Nsight Systems reports. NSYS_RULES lists them explicitly, in id order."""

from __future__ import annotations

from analysis.diagnosis.rules.base import Rule
from analysis.diagnosis.rules.nsys.claimed import AllocationChurn, HostCommunication, JitCompilation
from analysis.diagnosis.rules.nsys.collectives import CollectiveBandwidth
from analysis.diagnosis.rules.nsys.comm import ExposedCommunication, Stragglers
from analysis.diagnosis.rules.nsys.copybound import CopyBound
from analysis.diagnosis.rules.nsys.gpu import IdleGaps, LowUtilization
from analysis.diagnosis.rules.nsys.host import HostBlocked
from analysis.diagnosis.rules.nsys.hostcpu import HostCpuSamples
from analysis.diagnosis.rules.nsys.launch import LaunchBound
from analysis.diagnosis.rules.nsys.memory import (
    BlockingMemcpy,
    PageableMemcpy,
    SyncMemset,
    UnifiedMemoryMigration,
)
from analysis.diagnosis.rules.nsys.nodes import LateNode
from analysis.diagnosis.rules.nsys.outliers import KernelOutliers
from analysis.diagnosis.rules.nsys.phase import StartupCost, WarmupCost
from analysis.diagnosis.rules.nsys.serialized import SerializedCommunication
from analysis.diagnosis.rules.nsys.shape import DominantKernel, SmallGrid
from analysis.diagnosis.rules.nsys.sync import BlockingSync
from analysis.diagnosis.rules.nsys.tensorcores import TensorCoresIdle

NSYS_RULES: list[type[Rule]] = [
    ExposedCommunication,
    Stragglers,
    CollectiveBandwidth,
    SerializedCommunication,
    LateNode,
    IdleGaps,
    LowUtilization,
    HostBlocked,
    HostCpuSamples,
    HostCommunication,
    JitCompilation,
    LaunchBound,
    TensorCoresIdle,
    KernelOutliers,
    SmallGrid,
    DominantKernel,
    PageableMemcpy,
    BlockingMemcpy,
    SyncMemset,
    UnifiedMemoryMigration,
    CopyBound,
    AllocationChurn,
    StartupCost,
    WarmupCost,
    BlockingSync,
]
