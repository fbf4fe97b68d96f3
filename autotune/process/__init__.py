"""Worker interpreters that die with their parent: the process pool that measurement,
feature extraction and the service's code generation keep warm (`ChildProcess`)."""
