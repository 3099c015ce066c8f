package providers

import (
	"encoding/binary"
	"hash"
	"time"
)

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
	v, err := newMACVerifier(spec, opts)
	if err != nil {
		return nil, err
	}
	if spec.tsHeader != "" {
		return timestampedVerifier{v}, nil
	}
	return v, nil
}

// timestampedVerifier is a generic sender whose template signs a
// timestamp header. Its replay guard holds the timestamp with the body: a
// captured delivery can only be resent with its own timestamp (within the
// tolerance), while the sender's later events whose body repeats (a
// heartbeat, a status ping) carry a new one and are not taken for replays.
type timestampedVerifier struct{ *macVerifier }

var _ ReplayBodier = timestampedVerifier{}

// WriteReplayBody writes the timestamp header's value as sent (the bytes
// the signature covers), length-prefixed, then the body.
func (v timestampedVerifier) WriteReplayBody(h hash.Hash, r *Request) error {
	ts, err := peekSig(r.Header, v.spec.tsHeader, v.errNoTS)
	if err != nil {
		return err
	}
	h.Reset()
	var n [binary.MaxVarintLen64]byte
	h.Write(binary.AppendUvarint(n[:0], uint64(len(ts))))
	h.Write(ts)
	h.Write(r.Body)
	return nil
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
