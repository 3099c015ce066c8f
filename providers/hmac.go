package providers

import "time"

// generic is the "hmac" scheme: any sender that puts one HMAC of a template
// over {id}, {timestamp} and {body} in one header, described by Options.HMAC.
// Algorithm defaults to sha256, Encoding to hex, Template to "{body}". With a
// TimestampHeader, its value (unix seconds or milliseconds, or RFC 3339) must
// be within the tolerance. There is no default key.
type generic struct{}

func (generic) Name() string { return "hmac" }

func (generic) Defaults() Defaults {
	// ReplayGuard: on unless the operator's template signs an {id} (decided
	// by config from the spec, which Defaults does not see).
	return Defaults{Retention: 168 * time.Hour, AckStatus: ackAccepted, ReplayGuard: true}
}

func (generic) NewVerifier(opts Options) (Verifier, error) {
	spec, err := specFromHMAC(opts.HMAC)
	if err != nil {
		return nil, err
	}
	return verifier(newMACVerifier(spec, opts))
}

// Sign signs per spec; the timestamp header, when the spec has one, carries
// unix seconds.
func (generic) Sign(body, secret []byte, now time.Time, id string, hs *HMACSpec) ([]Header, error) {
	spec, err := specFromHMAC(hs)
	if err != nil {
		return nil, err
	}
	return spec.sign(body, secret, now, id)
}
