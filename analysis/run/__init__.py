"""The run: reports analysed one by one (step 1), then cross-rank facts and the roll-up (step 2)."""
