"""What every fusion pass asks before it fuses: instruction properties, legality rules, and how
often the elemental emitter would compute each fused instruction."""
