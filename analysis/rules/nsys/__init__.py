"""Rules over Nsight Systems reports. NSYS_RULES lists them explicitly, in id order."""

from __future__ import annotations

from analysis.rules.base import Rule
from analysis.rules.nsys.claimed import AllocationChurn, HostCommunication, JitCompilation
from analysis.rules.nsys.collectives import CollectiveBandwidth
from analysis.rules.nsys.comm import ExposedCommunication, Stragglers
from analysis.rules.nsys.copybound import CopyBound
from analysis.rules.nsys.gpu import IdleGaps, LowUtilization
from analysis.rules.nsys.host import HostBlocked
from analysis.rules.nsys.hostcpu import HostCpuSamples
from analysis.rules.nsys.launch import LaunchBound
from analysis.rules.nsys.memory import BlockingMemcpy, PageableMemcpy, SyncMemset, UnifiedMemoryMigration
from analysis.rules.nsys.nodes import LateNode
from analysis.rules.nsys.outliers import KernelOutliers
from analysis.rules.nsys.phase import StartupCost, WarmupCost
from analysis.rules.nsys.serialized import SerializedCommunication
from analysis.rules.nsys.shape import DominantKernel, SmallGrid
from analysis.rules.nsys.sync import BlockingSync
from analysis.rules.nsys.tensorcores import TensorCoresIdle

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
