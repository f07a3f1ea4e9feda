"""The app's composition: configuration, one Stage per environment, one stack per deployable unit."""
