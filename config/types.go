package config

import (
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"
)

// Duration is a time.Duration written in the config file as a Go duration
// string ("30s", "5m", "720h"). It implements encoding.TextUnmarshaler, so a bad
// value is reported by the TOML decoder with its line. Convert with
// time.Duration(d).
type Duration time.Duration

// UnmarshalText parses a Go duration string. A unit is required ("300" is an
// error, as is a bare TOML integer), except for "0".
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("invalid duration %q (a number and a unit: h, m, s, ms; e.g. \"24h\", \"90m\", \"30s\"; no d)", b)
	}
	*d = Duration(v)
	return nil
}

// MarshalText writes the form String returns, which UnmarshalText reads back.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// String is time.Duration's form without trailing zero units: "720h", "5m",
// "1h30m", "1.5s", "0s".
func (d Duration) String() string {
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// Byte multiples accepted by Size.
const (
	KiB = 1 << 10
	MiB = 1 << 20
	GiB = 1 << 30
)

// Size is a byte count written as an integer with an optional unit: "1048576",
// "512KiB", "1MiB", "1MB" (decimal), "2GiB". Units are B, KB, MB, GB (powers of
// 1000) and KiB, MiB, GiB (powers of 1024), case-insensitive; a space between
// number and unit is allowed. Convert with int64(s).
type Size int64

var sizeUnits = map[string]int64{
	"":    1,
	"b":   1,
	"kb":  1000,
	"mb":  1000 * 1000,
	"gb":  1000 * 1000 * 1000,
	"kib": KiB,
	"mib": MiB,
	"gib": GiB,
}

// ParseSize parses the form described on Size.
func ParseSize(s string) (Size, error) {
	bad := func() (Size, error) { return 0, fmt.Errorf("invalid size %q", s) }
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	if i == 0 {
		return bad()
	}
	n, err := strconv.ParseInt(t[:i], 10, 64)
	if err != nil {
		return bad()
	}
	mult, ok := sizeUnits[strings.ToLower(strings.TrimLeft(t[i:], " "))]
	if !ok {
		return bad()
	}
	if n > math.MaxInt64/mult {
		return bad()
	}
	return Size(n * mult), nil
}

// UnmarshalText parses the form described on Size.
func (s *Size) UnmarshalText(b []byte) error {
	v, err := ParseSize(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// MarshalText writes the form String returns, which UnmarshalText reads back.
func (s Size) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// String is the largest exact binary unit: "1MiB", "512KiB", "1000000".
func (s Size) String() string {
	n := int64(s)
	switch {
	case n <= 0:
		return strconv.FormatInt(n, 10)
	case n%GiB == 0:
		return strconv.FormatInt(n/GiB, 10) + "GiB"
	case n%MiB == 0:
		return strconv.FormatInt(n/MiB, 10) + "MiB"
	case n%KiB == 0:
		return strconv.FormatInt(n/KiB, 10) + "KiB"
	case n%1_000_000_000 == 0:
		return strconv.FormatInt(n/1_000_000_000, 10) + "GB"
	case n%1_000_000 == 0:
		return strconv.FormatInt(n/1_000_000, 10) + "MB"
	case n%1000 == 0:
		return strconv.FormatInt(n/1000, 10) + "KB"
	}
	return strconv.FormatInt(n, 10)
}

// redacted is what every printed form of a Secret shows.
const redacted = "<redacted>"

// Secret is key material: a webhook signing secret or a bearer token. Every way
// of printing it (fmt verbs, String, GoString, text, JSON, slog) shows
// "<redacted>", so a Config can be logged or served as JSON without leaking
// (docs/architecture.md, Invariants, 7). Use the bytes only to build
// verifiers and compare tokens.
type Secret []byte

// String returns "<redacted>".
func (Secret) String() string { return redacted }

// GoString returns "<redacted>".
func (Secret) GoString() string { return redacted }

// Format writes "<redacted>" for every verb, so %s, %x, %q and %v leak nothing.
func (Secret) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, redacted) }

// MarshalText returns "<redacted>".
func (Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// MarshalJSON returns the JSON string "<redacted>".
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// LogValue makes slog print "<redacted>".
func (Secret) LogValue() slog.Value { return slog.StringValue(redacted) }
