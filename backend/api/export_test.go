package api

// BodyLimit is bodyLimit for the external tests (the attack table sends each route a body just
// over its own limit).
func BodyLimit(path string) int64 { return bodyLimit(path) }
