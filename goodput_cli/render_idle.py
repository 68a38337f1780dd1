"""Plain-text idle anatomy of an nsys report: per device and phase, what the host did while the GPU idled."""

from __future__ import annotations

from typing import Any

from analysis import fmt

SHOWN = 6  # categories printed per device and phase, most time first


def idle_lines(rep: dict[str, Any], clip) -> list[str]:
    """A line per (device, phase) with idle, then its largest categories with their top names. ``clip``
    makes a trace string printable (escaped) and bounded."""
    lines: list[str] = []
    for e in rep.get("idle_anatomy") or []:
        idle = e["idle_ns"]
        lines.append(f"   idle anatomy, pid {e['pid']} device {e['device']} [{e['phase']}]: "
                     f"{fmt.duration(idle)} idle")
        for c in e["categories"][:SHOWN]:
            top = ", ".join(f"{clip(t['name'], 40)} {fmt.duration(t['ns'])} x{fmt.count(t['calls'])}" for t in c["top"][:3])
            share = 100.0 * c["ns"] / idle if idle else 0.0
            lines.append(f"     {c['category']:<13} {fmt.duration(c['ns']):>10} {fmt.pct(share):>7}" + (f"  {top}" if top else ""))
    return lines
