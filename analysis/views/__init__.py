"""Views: timelines, Chrome traces, tables and comparisons built from analysed reports."""
