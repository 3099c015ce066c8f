package config

// Warnings lists what the config allows but an operator should know about,
// one line each: settings that work yet weaken a guarantee (docs/security.md).
// `oncehook validate` prints them and exits 0; `serve` logs each at start and
// on reload. Warnings never refuse a config: Validate does that.
func (c *Config) Warnings() []string {
	var w []string
	for _, check := range warningChecks {
		w = append(w, check(c)...)
	}
	return w
}

// warningChecks are run in order by Warnings; each returns zero or more lines.
var warningChecks = []func(*Config) []string{}
