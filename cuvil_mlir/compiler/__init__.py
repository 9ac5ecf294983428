"""The compiler: import, the stage pipeline, precision policies and calibration."""
