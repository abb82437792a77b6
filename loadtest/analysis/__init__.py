"""From raw records to figures: records, exact statistics, SLO verdicts, the summary (pure)."""
