"""Scheduling: index maps, the kernel model, target descriptions, the cost model, the schedule search
and extraction, and the schedule's text. Imports engine/ir and engine/rewrite."""
