"""Code that runs on the fleet's instances; shipped as package data and installed by the fleet's user data."""
