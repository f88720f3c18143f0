//go:build race

package chaos

// raceBuild reports whether this test binary was built with -race; the
// server binary follows it by default.
const raceBuild = true
