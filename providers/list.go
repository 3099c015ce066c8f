package providers

import (
	"bytes"
	"errors"
	"time"
)

// listSpec describes a "key=value" list header carrying one timestamp and any
// number of signatures (Stripe: "t=..,v1=..,v1=..", Paddle: "ts=..;h1=..").
type listSpec struct {
	header string
	sep    byte
	tsKey  string
	sigKey string
	// signed content is ts + join + body
	join []byte
}

// parse reads the list into st (signatures, decoded) and returns the
// timestamp. Entries with other keys (Stripe's v0, future schemes) are
// ignored, so that a downgrade to a weaker scheme is impossible. Every entry
// is exactly key=value, with no space and no empty entry (as the providers'
// own libraries read it: a header they refuse is refused here too, so that
// a handler that checks the signature header again never fails an event
// this node acknowledged); the timestamp must appear exactly once; more
// than MaxSignatures signatures is an error before any MAC is computed; a
// signature that does not decode is skipped (its error is returned when no
// other one decodes).
func (l *listSpec) parse(raw []byte, st *macState) ([]byte, error) {
	var ts []byte
	var sigErr error
	seenTS := false
	if len(raw) > 0 && raw[len(raw)-1] == l.sep {
		return nil, errNoEquals // an empty last entry
	}
	for len(raw) > 0 {
		var item []byte
		if i := indexByte(raw, l.sep); i >= 0 {
			item, raw = raw[:i], raw[i+1:]
		} else {
			item, raw = raw, nil
		}
		eq := indexByte(item, '=')
		if eq < 0 {
			return nil, errNoEquals
		}
		k, v := item[:eq], item[eq+1:]
		if indexByte(v, '=') >= 0 || bytes.ContainsAny(item, " \t") {
			return nil, errListEntry
		}
		switch string(k) {
		case l.tsKey:
			if seenTS {
				return nil, errDupTimestamp
			}
			ts, seenTS = v, true
		case l.sigKey:
			// A signature that cannot be decoded is skipped, as Stripe's own
			// libraries do, so that one broken entry does not void a valid
			// one beside it; when none decodes, its error is the answer.
			switch err := st.addSig(v, encHex, algSHA256.size); {
			case errors.Is(err, errTooManySigs):
				return nil, err
			case err != nil && sigErr == nil:
				sigErr = err
			}
		}
	}
	if !seenTS {
		return nil, errNoTimestamp
	}
	if st.nsig == 0 && sigErr != nil {
		return nil, sigErr
	}
	return ts, nil
}

// listVerifier verifies a listSpec scheme.
type listVerifier struct {
	spec     *listSpec
	ring     *keyring
	tol      time.Duration
	errNoSig error
}

func newListVerifier(spec *listSpec, opts Options) (*listVerifier, error) {
	keys, err := secretKeys(opts.Secrets)
	if err != nil {
		return nil, err
	}
	tol, err := tolerance(opts.Tolerance, DefaultTolerance)
	if err != nil {
		return nil, err
	}
	ring, err := newKeyring(algSHA256, keys)
	if err != nil {
		return nil, err
	}
	return &listVerifier{spec: spec, ring: ring, tol: tol, errNoSig: missingHeader(spec.header)}, nil
}

func (v *listVerifier) Verify(r *Request) error {
	raw, err := peekSig(r.Header, v.spec.header, v.errNoSig)
	if err != nil {
		return err
	}
	st := v.ring.get()
	defer v.ring.put(st)
	ts, err := v.spec.parse(raw, st)
	if err != nil {
		return err
	}
	n, ok := parseUnix(ts)
	if !ok {
		return errTSFormat
	}
	if err := checkWindow(r.Now, time.Unix(n, 0), v.tol); err != nil {
		return err
	}
	if st.nsig == 0 {
		return errNoSupported
	}
	st.compute(ts, v.spec.join, r.Body)
	if !st.match() {
		return errNoMatch
	}
	return nil
}

func indexByte(b []byte, c byte) int { return bytes.IndexByte(b, c) }
