"""The decisions' statistics (drift, production quality, promotion, ``stats``) and the capture records they read:
functions of their evidence, the standard library (and the job side's held-out outcomes) only."""
