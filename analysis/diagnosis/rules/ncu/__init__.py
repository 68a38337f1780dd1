"""Rules over Nsight Compute reports. NCU_RULES lists the per-kernel rules NCU001-NCU007, in id order; the
rules over the ncu memory story (NCU008-NCU010) are added beside them in ``analysis.diagnosis.rules.registry``."""

from __future__ import annotations

from analysis.diagnosis.rules.base import Rule
from analysis.diagnosis.rules.ncu.ncu001_uncoalesced import UncoalescedGlobalAccess
from analysis.diagnosis.rules.ncu.ncu002_warp_stalls import WarpStalls
from analysis.diagnosis.rules.ncu.ncu003_occupancy import Occupancy
from analysis.diagnosis.rules.ncu.ncu004_bank_conflicts import SharedBankConflicts
from analysis.diagnosis.rules.ncu.ncu005_throughput import ThroughputBottleneck
from analysis.diagnosis.rules.ncu.ncu006_launch_config import LaunchConfiguration
from analysis.diagnosis.rules.ncu.ncu007_pipes import PipeUtilization

NCU_RULES: list[type[Rule]] = [
    UncoalescedGlobalAccess,
    WarpStalls,
    Occupancy,
    SharedBankConflicts,
    ThroughputBottleneck,
    LaunchConfiguration,
    PipeUtilization,
]
