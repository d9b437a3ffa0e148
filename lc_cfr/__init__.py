"""lc_cfr: a Deep CFR trainer for two-player Lost Cities."""
