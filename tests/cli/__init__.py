"""Tests of the command line itself: lazy loading, help, the choice lists."""
