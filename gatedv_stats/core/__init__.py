"""The ground layer: errors, argument checks, atomic writes, file and output helpers, worker processes and number
formatting. Every other layer (io, stats, analysis, reporting, trainer) may import it; it imports none of them."""
