package logstore

// BootFiles lets the package's external tests find a boot's files.
var BootFiles = bootFiles
