package vm

// SilentDriver exposes silentDriver to the integration tests (package vm_test).
var SilentDriver = silentDriver
