"""Reports of a timeline: terminal summary, Gantt chart, Chrome/Perfetto trace."""
