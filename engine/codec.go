package engine

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"unsafe"
)

// This file holds the hand-written binary encodings: the stored records
// (event, payload, response) and the Raft log entry codec. Every format starts
// with a version byte; numbers are encoding/binary varints and uvarints;
// strings and byte slices are uvarint-length-prefixed. Decoders never panic and
// report malformed input as an error wrapping ErrCorrupt.

// Format versions. Bump a version when its layout changes and keep decoding the
// old one. An optional field can instead be added behind a record flag or an
// entry field-mask bit (as Step was): values without it keep their bytes and
// version, so every stored file and log still decodes; only a binary that
// predates the field refuses a value that carries it (an entry with
// ErrNewerFormat, see version.go), which is why a cluster is upgraded follower
// by follower, leader last. Every such addition raises FormatVersion.
const (
	recordVersion   = 1
	payloadVersion  = 1
	responseVersion = 1
	// responseTypeVersion is a response value that carries the handler's
	// Content-Type (format 10); one without keeps version 1 and its bytes.
	responseTypeVersion = 2
	// entryVersion 2 follows the version byte with the writer's
	// FormatVersion (a uvarint): the commands of an entry are applied with
	// the meanings of the binary that wrote it (Command.semantics), so that
	// a newer follower applying an older leader's entries computes what the
	// older leader computes. Version 1 (no format) is what the first
	// releases wrote, read as format legacyFormat; a relay (a follower's
	// batch for the leader, re-encoded by the leader's proposer) still uses
	// it, so that a newer follower can relay to an older leader during a
	// rolling upgrade.
	entryVersion = 2
	relayVersion = 1
)

// legacyFormat is the format of the meanings a version 1 entry is applied
// with: that of the last binary that wrote version 1 log entries.
const legacyFormat = 3

// Record flags (byte 2 of an event record). A flag may announce an optional
// field at the end of the record, so a record without it keeps the version 1
// layout byte for byte and every stored record still decodes.
const (
	flagResponse = 1 << 0 // a cached Response is stored in the responses bucket
	flagStep     = 1 << 1 // the record ends with the event's Step (non-empty)
	flagBody     = 1 << 2 // the event holds a replay-guard entry in the bodies bucket
	flagDeadKept = 1 << 3 // dead, and ExpiresAt already counts its dead retention (Expire deletes it)
	flagLife     = 1 << 4 // the record ends with Retention and PayloadDropAt (see appendRecord)
	flagOrder    = 1 << 5 // the record ends with the event's order object and queue place (order.go)
	flagHistory  = 1 << 6 // the event has failed attempts in the attempts bucket (history.go)
	flagsKnown   = flagResponse | flagStep | flagBody | flagDeadKept | flagLife | flagOrder | flagHistory
)

// Limits enforced on commands. They keep records and index keys well inside
// bbolt's limits and make a hostile entry cheap to reject.
const (
	MaxKeyLen     = 512      // idempotency keys, sources, order objects, replay keys
	MaxTextLen    = 1024     // fail and replay reasons: longer values are cut (deterministically)
	MaxHeaders    = 256      // headers kept per event
	MaxHeaderLen  = 16 << 10 // one header name or value
	MaxPayloadLen = 64 << 20 // one payload or cached response body
	MaxStepLen    = 128      // a handler's step (Oncehook-Step): printable ASCII
	maxAudit      = 64       // audit entries kept per event; the oldest are dropped
)

// decoder reads the primitive encodings from b. The first failure sticks in err
// and every later read returns a zero value, so callers check err once.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrCorrupt, what)
	}
}

func (d *decoder) byte(what string) byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.fail(what)
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 || n != uvarintLen(v) {
		d.fail(what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

// uvarintLen is the length of the shortest encoding of v. Decoders accept
// only that one, so every value has one encoding.
func uvarintLen(v uint64) int { return max(1, (bits.Len64(v)+6)/7) }

func (d *decoder) varint(what string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 || n != uvarintLen(uint64(v<<1)^uint64(v>>63)) {
		d.fail(what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

// bytes reads a length-prefixed byte string and returns a sub-slice of the
// input (no copy).
func (d *decoder) bytes(what string) []byte {
	n := d.uvarint(what)
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail(what)
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

// count reads an element count and checks that at least min bytes per element
// remain, so a hostile count cannot make the caller allocate a huge slice.
func (d *decoder) count(what string, min int) int {
	n := d.uvarint(what)
	if d.err != nil {
		return 0
	}
	if n > uint64(len(d.b)/min) {
		d.fail(what)
		return 0
	}
	return int(n)
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendBytes(dst []byte, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// ---- event record -------------------------------------------------------

// The event record, stored in the events bucket under the event's key:
//
//	byte     version (1)
//	byte     state
//	byte     flags (flagResponse)
//	uvarint  attempts, token
//	varint   createdAt, updatedAt, nextAttemptAt, leaseUntil, expiresAt, leaseFor
//	string   source, lastError
//	uvarint  number of audit entries, then each:
//	         varint at, string who, string action, string reason, byte from
//	string   step, only when flags has flagStep (then never empty)
//	string   order object, varint order time, uvarint order index, uvarint
//	         order position, only when flags has flagOrder (order.go)
//	varint   retention, payloadDropAt, only when flags has flagLife (set
//	         when either is not 0: the expiry moved, or a done event's
//	         payload has a drop time)
//
// The key is not repeated (it is the bbolt key). Payload, headers and the
// cached response live in their own buckets so that the record stays small.

// recordSize is an upper bound of the encoded size of ev.
func recordSize(ev *Event) int {
	n := 3 + 2*binary.MaxVarintLen64 + 6*binary.MaxVarintLen64 +
		2*binary.MaxVarintLen64 + len(ev.Source) + len(ev.LastError) + binary.MaxVarintLen64
	for i := range ev.Audit {
		a := &ev.Audit[i]
		n += binary.MaxVarintLen64 + 3*binary.MaxVarintLen64 + len(a.Who) + len(a.Action) + len(a.Reason) + 1
	}
	return n + binary.MaxVarintLen64 + len(ev.Step) + 6*binary.MaxVarintLen64 + len(ev.OrderObject)
}

// hasLife reports whether ev's record needs its flagLife fields.
func hasLife(ev *Event) bool { return ev.Retention != 0 || ev.PayloadDropAt != 0 }

// appendRecord appends the record encoding of ev (without payload, headers,
// response) to dst. flagStep is set from ev.Step, whatever flags says;
// flagOrder from ev.OrderObject.
func appendRecord(dst []byte, ev *Event, flags byte) []byte {
	flags &^= flagStep | flagOrder | flagLife
	if ev.Step != "" {
		flags |= flagStep
	}
	if ev.OrderObject != "" {
		flags |= flagOrder
	}
	life := hasLife(ev)
	if life {
		flags |= flagLife
	}
	dst = append(dst, recordVersion, byte(ev.State), flags)
	dst = binary.AppendUvarint(dst, uint64(ev.Attempts))
	dst = binary.AppendUvarint(dst, ev.Token)
	dst = binary.AppendVarint(dst, ev.CreatedAt)
	dst = binary.AppendVarint(dst, ev.UpdatedAt)
	dst = binary.AppendVarint(dst, ev.NextAttemptAt)
	dst = binary.AppendVarint(dst, ev.LeaseUntil)
	dst = binary.AppendVarint(dst, ev.ExpiresAt)
	dst = binary.AppendVarint(dst, ev.LeaseFor)
	dst = appendString(dst, ev.Source)
	dst = appendString(dst, ev.LastError)
	dst = binary.AppendUvarint(dst, uint64(len(ev.Audit)))
	for i := range ev.Audit {
		a := &ev.Audit[i]
		dst = binary.AppendVarint(dst, a.At)
		dst = appendString(dst, a.Who)
		dst = appendString(dst, a.Action)
		dst = appendString(dst, a.Reason)
		dst = append(dst, byte(a.From))
	}
	if ev.Step != "" {
		dst = appendString(dst, ev.Step)
	}
	if ev.OrderObject != "" {
		dst = appendString(dst, ev.OrderObject)
		dst = binary.AppendVarint(dst, ev.OrderTime)
		dst = binary.AppendUvarint(dst, ev.OrderIndex)
		dst = binary.AppendUvarint(dst, uint64(ev.OrderPos))
	}
	if life {
		dst = binary.AppendVarint(dst, ev.Retention)
		dst = binary.AppendVarint(dst, ev.PayloadDropAt)
	}
	return dst
}

func validState(s State) bool { return s >= StatePending && s <= StateStale }

// decodeRecord decodes an event record stored under key into ev (Key,
// Payload, Headers and Response are left empty: the caller sets Key from the
// bbolt key) and returns its flags. A bad
// record yields an error wrapping ErrCorrupt that names the key.
func decodeRecord(key, b []byte, ev *Event) (byte, error) {
	d := decoder{b: b}
	if v := d.byte("version"); d.err == nil && v != recordVersion {
		d.fail(fmt.Sprintf("record version %d", v))
	}
	st := State(d.byte("state"))
	if d.err == nil && !validState(st) {
		d.fail(fmt.Sprintf("state %d", st))
	}
	flags := d.byte("flags")
	if d.err == nil && flags&^flagsKnown != 0 {
		d.fail(fmt.Sprintf("flags %#x", flags))
	}
	attempts := d.uvarint("attempts")
	if d.err == nil && attempts > math.MaxUint32 {
		d.fail("attempts")
	}
	*ev = Event{
		State:         st,
		Attempts:      uint32(attempts),
		Token:         d.uvarint("token"),
		CreatedAt:     d.varint("createdAt"),
		UpdatedAt:     d.varint("updatedAt"),
		NextAttemptAt: d.varint("nextAttemptAt"),
		LeaseUntil:    d.varint("leaseUntil"),
		ExpiresAt:     d.varint("expiresAt"),
		LeaseFor:      d.varint("leaseFor"),
	}
	ev.Source = string(d.bytes("source"))
	ev.LastError = string(d.bytes("lastError"))
	if n := d.count("audit", 5); n > 0 {
		ev.Audit = make([]AuditEntry, n)
		for i := range ev.Audit {
			a := &ev.Audit[i]
			a.At = d.varint("audit at")
			a.Who = string(d.bytes("audit who"))
			a.Action = string(d.bytes("audit action"))
			a.Reason = string(d.bytes("audit reason"))
			a.From = State(d.byte("audit from"))
		}
	}
	if flags&flagStep != 0 {
		ev.Step = string(d.bytes("step"))
		if d.err == nil && ev.Step == "" {
			d.fail("step: flagged but empty")
		}
	}
	if flags&flagOrder != 0 {
		ev.OrderObject = string(d.bytes("order object"))
		ev.OrderTime = d.varint("order time")
		ev.OrderIndex = d.uvarint("order index")
		pos := d.uvarint("order position")
		ev.OrderPos = uint32(pos)
		if d.err == nil && (ev.OrderObject == "" || pos > math.MaxUint32) {
			d.fail("order: flagged but empty")
		}
	}
	if flags&flagLife != 0 {
		ev.Retention = d.varint("retention")
		ev.PayloadDropAt = d.varint("payloadDropAt")
		if d.err == nil && !hasLife(ev) {
			d.fail("life: flagged but empty")
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes")
	}
	if d.err != nil {
		*ev = Event{}
		return 0, fmt.Errorf("event %q: %w", clip(key), d.err)
	}
	return flags, nil
}

// recordState returns the state byte of an event record without decoding the
// rest (the cheap path of Exists and of duplicate claims).
func recordState(key, b []byte) (State, error) {
	if len(b) < 3 || b[0] != recordVersion || !validState(State(b[1])) {
		return 0, fmt.Errorf("event %q: %w: record header", clip(key), ErrCorrupt)
	}
	return State(b[1]), nil
}

// clip shortens a key for an error message.
func clip(k []byte) []byte {
	if len(k) > 80 {
		return k[:80]
	}
	return k
}

// ---- payload and response values ----------------------------------------

// The payload value, stored in the payloads bucket under the event's key:
//
//	byte     version (1)
//	uvarint  number of headers, then each: string name, string value
//	...      the payload bytes, to the end of the value

func payloadSize(headers []Header, payload []byte) int {
	n := 1 + binary.MaxVarintLen64 + len(payload)
	for i := range headers {
		n += 2*binary.MaxVarintLen64 + len(headers[i].Name) + len(headers[i].Value)
	}
	return n
}

func appendPayload(dst []byte, headers []Header, payload []byte) []byte {
	dst = append(dst, payloadVersion)
	dst = binary.AppendUvarint(dst, uint64(len(headers)))
	for i := range headers {
		dst = appendString(dst, headers[i].Name)
		dst = appendString(dst, headers[i].Value)
	}
	return append(dst, payload...)
}

// The response value, stored in the responses bucket under the event's key:
//
//	byte     version (1, or 2 with a content type)
//	varint   status
//	bytes    version 2 only: the handler's Content-Type, length-prefixed, not empty
//	...      the body, to the end of the value

func appendResponse(dst []byte, r *Response) []byte {
	if r.ContentType == "" {
		dst = append(dst, responseVersion)
		dst = binary.AppendVarint(dst, int64(r.Status))
		return append(dst, r.Body...)
	}
	dst = append(dst, responseTypeVersion)
	dst = binary.AppendVarint(dst, int64(r.Status))
	dst = appendString(dst, r.ContentType)
	return append(dst, r.Body...)
}

func decodeResponse(key, b []byte) (*Response, error) {
	d := decoder{b: b}
	v := d.byte("response version")
	if d.err == nil && v != responseVersion && v != responseTypeVersion {
		d.fail(fmt.Sprintf("response version %d", v))
	}
	st := d.varint("status")
	if d.err == nil && (st < math.MinInt32 || st > math.MaxInt32) {
		d.fail("status")
	}
	var ct []byte
	if v == responseTypeVersion {
		if ct = d.bytes("content type"); d.err == nil && len(ct) == 0 {
			d.fail("content type: present but empty")
		}
	}
	if d.err != nil {
		return nil, fmt.Errorf("response %q: %w", clip(key), d.err)
	}
	r := &Response{Status: int(st), ContentType: string(ct)}
	if len(d.b) > 0 {
		r.Body = append([]byte(nil), d.b...)
	}
	return r, nil
}

// ---- Raft entry codec ---------------------------------------------------

// An entry (the commands of one Raft log entry):
//
//	byte     version (1)
//	uvarint  number of commands, then each:
//	byte     op
//	uvarint  field mask: bit i set when field i is present (non-zero)
//	...      the present fields in bit order
//
// Field i (see the fieldXxx constants): varints for signed numbers, uvarint for
// Token, one byte for State, length-prefixed strings and bytes; Headers and Keys
// are a uvarint count then the elements; Response is a varint status then the
// body. fieldStep (a string) was added after version 1 shipped, behind its own
// mask bit, and so were fieldBodyKey (a string) and fieldAttempt (varint at,
// varint took, varint status, string error, bytes body). OpPause and OpResume (added later) carry only fields that
// existed before (Now, Source, Who, Reason), so entries written before them
// decode unchanged. A zero field is never written, and a present field must not be zero, so
// every command list has exactly one encoding: DecodeEntry(EncodeEntry(c))
// re-encodes to the same bytes.
const (
	fieldNow = iota
	fieldKey
	fieldSource
	fieldPayload
	fieldHeaders
	fieldRetention
	fieldOrderObject
	fieldOrderTime
	fieldMax
	fieldLeaseFor
	fieldToken
	fieldResponse
	fieldRetryIn
	fieldMaxAttempts
	fieldReason
	fieldKeys
	fieldState
	fieldSince
	fieldWho
	fieldBefore
	fieldStep    // added after version 1 shipped: older entries never set it
	fieldBodyKey // added with the replay guard: older entries never set it
	fieldAttempt // added with the attempt history: older entries never set it
	// Added with the retention rules: older entries never set them.
	fieldPayloadRetention
	fieldDeadRetention
	fieldHorizon
	fieldOnlyFrom // added with the provider's re-arm of dead sync events
	fieldLeaseNow // added with the claim's lease: older entries never set it
	// Added with the due index by source: older entries never set them.
	fieldQuotas
	fieldShare
	fieldSpare
	fieldResponseType // added with the handler's Content-Type of a sync answer
	fieldRefund       // added with the hand-back's refund: no value, the bit says it
	fieldLeases       // added with the lease lengths by source
	numFields
)

func commandMask(c *Command) uint64 {
	var m uint64
	set := func(f int, ok bool) {
		if ok {
			m |= 1 << f
		}
	}
	set(fieldNow, c.Now != 0)
	set(fieldKey, c.Key != "")
	set(fieldSource, c.Source != "")
	set(fieldPayload, len(c.Payload) != 0)
	set(fieldHeaders, len(c.Headers) != 0)
	set(fieldRetention, c.Retention != 0)
	set(fieldOrderObject, c.OrderObject != "")
	set(fieldOrderTime, c.OrderTime != 0)
	set(fieldMax, c.Max != 0)
	set(fieldLeaseFor, c.LeaseFor != 0)
	set(fieldToken, c.Token != 0)
	set(fieldResponse, c.Response != nil)
	set(fieldRetryIn, c.RetryIn != 0)
	set(fieldMaxAttempts, c.MaxAttempts != 0)
	set(fieldReason, c.Reason != "")
	set(fieldKeys, len(c.Keys) != 0)
	set(fieldState, c.State != 0)
	set(fieldSince, c.Since != 0)
	set(fieldWho, c.Who != "")
	set(fieldBefore, c.Before != 0)
	set(fieldStep, c.Step != "")
	set(fieldBodyKey, c.BodyKey != "")
	set(fieldAttempt, c.Attempt != nil)
	set(fieldPayloadRetention, c.PayloadRetention != 0)
	set(fieldDeadRetention, c.DeadRetention != 0)
	set(fieldHorizon, c.Horizon != 0)
	set(fieldOnlyFrom, c.OnlyFrom != 0)
	set(fieldLeaseNow, c.LeaseNow != 0)
	set(fieldQuotas, len(c.Quotas) != 0)
	set(fieldShare, c.Share != 0)
	set(fieldSpare, c.Spare != 0)
	set(fieldResponseType, c.Response != nil && c.Response.ContentType != "")
	set(fieldRefund, c.Refund)
	set(fieldLeases, len(c.Leases) != 0)
	return m
}

// EncodeEntry appends the binary encoding of cmds to dst and returns the
// extended slice. It is what the cluster puts in a Raft log entry; DecodeEntry
// reverses it. It allocates only when dst lacks capacity.
func EncodeEntry(dst []byte, cmds []Command) []byte {
	// An entry of 64 claims of 1 KiB is about 70 KiB: growing the buffer by
	// doubling copied it over and over, and each large allocation is
	// cleared first.
	dst = slices.Grow(dst, 1+binary.MaxVarintLen64+commandsSize(cmds))
	dst = append(dst, entryVersion)
	dst = binary.AppendUvarint(dst, FormatVersion)
	return appendCommands(dst, cmds)
}

// EncodeRelayEntry is EncodeEntry without the writer's format (version 1),
// for a follower's batch relayed to the leader: the leader decodes it and
// proposes the commands in an entry of its own, so the format that matters
// is the leader's. An older leader reads version 1.
func EncodeRelayEntry(dst []byte, cmds []Command) []byte {
	dst = slices.Grow(dst, 1+commandsSize(cmds))
	dst = append(dst, relayVersion)
	return appendCommands(dst, cmds)
}

func appendCommands(dst []byte, cmds []Command) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(cmds)))
	for i := range cmds {
		dst = appendCommand(dst, &cmds[i])
	}
	return dst
}

// commandsSize is about what appendCommands appends for cmds: the
// variable-length fields' bytes, and a generous allowance for the numbers,
// masks and lengths.
func commandsSize(cmds []Command) int {
	n := binary.MaxVarintLen64
	for i := range cmds {
		c := &cmds[i]
		n += 64 + len(c.Key) + len(c.Source) + len(c.Payload) + len(c.OrderObject) + len(c.BodyKey) + len(c.Step) +
			len(c.Reason) + len(c.Who)
		for _, k := range c.Keys {
			n += 2 + len(k)
		}
		if c.Attempt != nil {
			n += 32 + len(c.Attempt.Error) + len(c.Attempt.Body)
		}
		for _, h := range c.Headers {
			n += 4 + len(h.Name) + len(h.Value)
		}
		if c.Response != nil {
			n += 10 + len(c.Response.Body) + len(c.Response.ContentType)
		}
		for _, q := range c.Quotas {
			n += 16 + len(q.Source)
		}
		for _, l := range c.Leases {
			n += 16 + len(l.Source)
		}
	}
	return n
}

// appendCommand appends one command: its op, its field mask and the fields
// the mask names, in field order (entryDecoder.command reads them back).
func appendCommand(dst []byte, c *Command) []byte {
	m := commandMask(c)
	dst = append(dst, byte(c.Op))
	dst = binary.AppendUvarint(dst, m)
	if m == 0 {
		return dst
	}
	if m&(1<<fieldNow) != 0 {
		dst = binary.AppendVarint(dst, c.Now)
	}
	if m&(1<<fieldKey) != 0 {
		dst = appendString(dst, c.Key)
	}
	if m&(1<<fieldSource) != 0 {
		dst = appendString(dst, c.Source)
	}
	if m&(1<<fieldPayload) != 0 {
		dst = appendBytes(dst, c.Payload)
	}
	if m&(1<<fieldHeaders) != 0 {
		dst = binary.AppendUvarint(dst, uint64(len(c.Headers)))
		for j := range c.Headers {
			dst = appendString(dst, c.Headers[j].Name)
			dst = appendString(dst, c.Headers[j].Value)
		}
	}
	if m&(1<<fieldRetention) != 0 {
		dst = binary.AppendVarint(dst, c.Retention)
	}
	if m&(1<<fieldOrderObject) != 0 {
		dst = appendString(dst, c.OrderObject)
	}
	if m&(1<<fieldOrderTime) != 0 {
		dst = binary.AppendVarint(dst, c.OrderTime)
	}
	if m&(1<<fieldMax) != 0 {
		dst = binary.AppendVarint(dst, int64(c.Max))
	}
	if m&(1<<fieldLeaseFor) != 0 {
		dst = binary.AppendVarint(dst, c.LeaseFor)
	}
	if m&(1<<fieldToken) != 0 {
		dst = binary.AppendUvarint(dst, c.Token)
	}
	if m&(1<<fieldResponse) != 0 {
		dst = binary.AppendVarint(dst, int64(c.Response.Status))
		dst = appendBytes(dst, c.Response.Body)
	}
	if m&(1<<fieldRetryIn) != 0 {
		dst = binary.AppendVarint(dst, c.RetryIn)
	}
	if m&(1<<fieldMaxAttempts) != 0 {
		dst = binary.AppendVarint(dst, int64(c.MaxAttempts))
	}
	if m&(1<<fieldReason) != 0 {
		dst = appendString(dst, c.Reason)
	}
	if m&(1<<fieldKeys) != 0 {
		dst = binary.AppendUvarint(dst, uint64(len(c.Keys)))
		for _, k := range c.Keys {
			dst = appendString(dst, k)
		}
	}
	if m&(1<<fieldState) != 0 {
		dst = append(dst, byte(c.State))
	}
	if m&(1<<fieldSince) != 0 {
		dst = binary.AppendVarint(dst, c.Since)
	}
	if m&(1<<fieldWho) != 0 {
		dst = appendString(dst, c.Who)
	}
	if m&(1<<fieldBefore) != 0 {
		dst = binary.AppendVarint(dst, c.Before)
	}
	if m&(1<<fieldStep) != 0 {
		dst = appendString(dst, c.Step)
	}
	if m&(1<<fieldBodyKey) != 0 {
		dst = appendString(dst, c.BodyKey)
	}
	if m&(1<<fieldAttempt) != 0 {
		dst = appendAttempt(dst, c.Attempt)
	}
	if m&(1<<fieldPayloadRetention) != 0 {
		dst = binary.AppendVarint(dst, c.PayloadRetention)
	}
	if m&(1<<fieldDeadRetention) != 0 {
		dst = binary.AppendVarint(dst, c.DeadRetention)
	}
	if m&(1<<fieldHorizon) != 0 {
		dst = binary.AppendVarint(dst, c.Horizon)
	}
	if m&(1<<fieldOnlyFrom) != 0 {
		dst = append(dst, byte(c.OnlyFrom))
	}
	if m&(1<<fieldLeaseNow) != 0 {
		dst = binary.AppendVarint(dst, c.LeaseNow)
	}
	if m&(1<<fieldQuotas) != 0 {
		dst = binary.AppendUvarint(dst, uint64(len(c.Quotas)))
		for _, q := range c.Quotas {
			dst = appendString(dst, q.Source)
			v := uint64(q.Max) << 1
			if q.Hard {
				v |= 1
			}
			dst = binary.AppendUvarint(dst, v)
		}
	}
	if m&(1<<fieldShare) != 0 {
		dst = binary.AppendVarint(dst, int64(c.Share))
	}
	if m&(1<<fieldSpare) != 0 {
		dst = binary.AppendVarint(dst, int64(c.Spare))
	}
	if m&(1<<fieldResponseType) != 0 {
		dst = appendString(dst, c.Response.ContentType)
	}
	if m&(1<<fieldLeases) != 0 {
		dst = binary.AppendUvarint(dst, uint64(len(c.Leases)))
		for _, l := range c.Leases {
			dst = appendString(dst, l.Source)
			dst = binary.AppendVarint(dst, l.For)
		}
	}
	return dst
}

// entryDecoder decodes strings as sub-strings of one copy of the entry and
// byte fields as sub-slices of another, so a decoded entry costs a handful of
// allocations whatever its number of fields. Nothing decoded aliases the
// caller's b, unless shared is set: then strings and byte fields point into
// b itself and nothing is copied.
type entryDecoder struct {
	decoder
	base   int    // len of the whole input
	str    string // string copy of the whole input, made on first use
	bcopy  []byte // []byte copy of the whole input, made on first use
	orig   []byte
	shared bool // decode in place (DecodeEntryShared)
}

func (d *entryDecoder) off() int { return d.base - len(d.b) }

func (d *entryDecoder) string(what string, nonEmpty bool) string {
	v := d.decoder.bytes(what)
	if d.err != nil {
		return ""
	}
	if nonEmpty && len(v) == 0 {
		d.fail(what + ": present but empty")
		return ""
	}
	if len(v) == 0 {
		return ""
	}
	if d.shared {
		return unsafe.String(unsafe.SliceData(v), len(v))
	}
	if d.str == "" {
		d.str = string(d.orig)
	}
	end := d.off()
	return d.str[end-len(v) : end]
}

func (d *entryDecoder) byteSlice(what string, nonEmpty bool) []byte {
	v := d.decoder.bytes(what)
	if d.err != nil {
		return nil
	}
	if nonEmpty && len(v) == 0 {
		d.fail(what + ": present but empty")
		return nil
	}
	if len(v) == 0 {
		return nil
	}
	if d.shared {
		return v
	}
	if d.bcopy == nil {
		d.bcopy = append([]byte(nil), d.orig...)
	}
	end := d.off()
	return d.bcopy[end-len(v) : end : end]
}

func (d *entryDecoder) nonZeroVarint(what string) int64 {
	v := d.varint(what)
	if d.err == nil && v == 0 {
		d.fail(what + ": present but zero")
	}
	return v
}

// DecodeEntry decodes an entry written by EncodeEntry. Malformed input gives an
// error wrapping ErrCorrupt; an entry a newer binary wrote (a newer entry
// version, a field-mask bit or an op above this binary's) one wrapping
// ErrNewerFormat (version.go); it never panics. Op 0 decodes (Apply rejects
// it with ErrBadCommand). The decoded commands do not alias b.
func DecodeEntry(b []byte) ([]Command, error) {
	return decodeEntry(b, false)
}

// DecodeEntryShared is DecodeEntry without the copies: the strings and byte
// slices of the commands point into b, so b must never be modified while
// they, or anything kept of them, are in use: a replay's result Keys, and
// until the next commit the keys ApplyBatchDeferred remembers for Exists. A
// Raft log entry's Data qualifies: raft never writes to it once it is
// appended. It saves two copies of the entry (payloads included) per decode.
func DecodeEntryShared(b []byte) ([]Command, error) {
	return decodeEntry(b, true)
}

func decodeEntry(b []byte, shared bool) ([]Command, error) {
	d := entryDecoder{decoder: decoder{b: b}, base: len(b), orig: b, shared: shared}
	format, n := d.header()
	if d.err != nil {
		return nil, fmt.Errorf("entry: %w", d.err)
	}
	cmds := make([]Command, n)
	for i := range cmds {
		c := &cmds[i]
		c.format = format
		if d.command(c); d.err != nil {
			break
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes")
	}
	if d.err != nil {
		return nil, fmt.Errorf("entry: %w", d.err)
	}
	return cmds, nil
}

// header reads an entry's version, its writer's format (0 for today's, the
// meanings of a Command built in process) and its command count.
func (d *entryDecoder) header() (format uint8, n int) {
	f := uint64(legacyFormat)
	switch v := d.byte("entry version"); {
	case d.err != nil:
	case v == fragmentVersion:
		d.fail("a fragment of an entry, decoded alone (fragment.go)")
	case v > entryVersion:
		d.failNewer(fmt.Sprintf("entry version %d", v))
	case v == entryVersion:
		f = d.uvarint("entry format")
		if d.err == nil && f > FormatVersion {
			d.failNewer(fmt.Sprintf("entry of format %d", f))
		} else if d.err == nil && f == 0 {
			d.fail("entry format 0")
		}
	case v != relayVersion:
		d.fail(fmt.Sprintf("entry version %d", v))
	}
	if f == FormatVersion {
		f = 0 // today's meanings: the zero value, as in a Command built in process
	}
	return uint8(f), d.count("command count", 2)
}

// command reads one command: its op, its field mask and the fields the mask
// names, in field order.
func (d *entryDecoder) command(c *Command) {
	c.Op = Op(d.byte("op"))
	if d.err == nil && c.Op > lastOp {
		d.failNewer(fmt.Sprintf("op %d", c.Op))
	}
	m := d.uvarint("field mask")
	if d.err == nil && m>>numFields != 0 {
		d.failNewer(fmt.Sprintf("entry field %d (mask %#x)", numFields+bits.TrailingZeros64(m>>numFields), m))
	}
	if d.err != nil || m == 0 {
		return
	}
	if m&(1<<fieldNow) != 0 {
		c.Now = d.nonZeroVarint("now")
	}
	if m&(1<<fieldKey) != 0 {
		c.Key = d.string("key", true)
	}
	if m&(1<<fieldSource) != 0 {
		c.Source = d.string("source", true)
	}
	if m&(1<<fieldPayload) != 0 {
		c.Payload = d.byteSlice("payload", true)
	}
	if m&(1<<fieldHeaders) != 0 {
		c.Headers = d.headers()
	}
	if m&(1<<fieldRetention) != 0 {
		c.Retention = d.nonZeroVarint("retention")
	}
	if m&(1<<fieldOrderObject) != 0 {
		c.OrderObject = d.string("order object", true)
	}
	if m&(1<<fieldOrderTime) != 0 {
		c.OrderTime = d.nonZeroVarint("order time")
	}
	if m&(1<<fieldMax) != 0 {
		c.Max = int(d.nonZeroVarint("max"))
	}
	if m&(1<<fieldLeaseFor) != 0 {
		c.LeaseFor = d.nonZeroVarint("lease for")
	}
	if m&(1<<fieldToken) != 0 {
		c.Token = d.uvarint("token")
		if d.err == nil && c.Token == 0 {
			d.fail("token: present but zero")
		}
	}
	if m&(1<<fieldResponse) != 0 {
		c.Response = d.response()
	}
	if m&(1<<fieldRetryIn) != 0 {
		c.RetryIn = d.nonZeroVarint("retry in")
	}
	if m&(1<<fieldMaxAttempts) != 0 {
		c.MaxAttempts = d.int32("max attempts", true)
	}
	if m&(1<<fieldReason) != 0 {
		c.Reason = d.string("reason", true)
	}
	if m&(1<<fieldKeys) != 0 {
		c.Keys = d.keys()
	}
	if m&(1<<fieldState) != 0 {
		c.State = State(d.byte("state"))
		if d.err == nil && c.State == 0 {
			d.fail("state: present but zero")
		}
	}
	if m&(1<<fieldSince) != 0 {
		c.Since = d.nonZeroVarint("since")
	}
	if m&(1<<fieldWho) != 0 {
		c.Who = d.string("who", true)
	}
	if m&(1<<fieldBefore) != 0 {
		c.Before = d.nonZeroVarint("before")
	}
	if m&(1<<fieldStep) != 0 {
		c.Step = d.string("step", true)
	}
	if m&(1<<fieldBodyKey) != 0 {
		c.BodyKey = d.string("body key", true)
	}
	if m&(1<<fieldAttempt) != 0 {
		c.Attempt = d.attempt()
	}
	if m&(1<<fieldPayloadRetention) != 0 {
		c.PayloadRetention = d.nonZeroVarint("payload retention")
	}
	if m&(1<<fieldDeadRetention) != 0 {
		c.DeadRetention = d.nonZeroVarint("dead retention")
	}
	if m&(1<<fieldHorizon) != 0 {
		c.Horizon = d.nonZeroVarint("horizon")
	}
	if m&(1<<fieldOnlyFrom) != 0 {
		if c.OnlyFrom = State(d.byte("only from")); d.err == nil && c.OnlyFrom == 0 {
			d.fail("only from: zero")
		}
	}
	if m&(1<<fieldLeaseNow) != 0 {
		c.LeaseNow = d.nonZeroVarint("lease now")
	}
	if m&(1<<fieldQuotas) != 0 {
		c.Quotas = d.quotas()
	}
	if m&(1<<fieldShare) != 0 {
		c.Share = d.int32("share", true)
	}
	if m&(1<<fieldSpare) != 0 {
		c.Spare = d.int32("spare", true)
	}
	c.Refund = m&(1<<fieldRefund) != 0
	if m&(1<<fieldResponseType) != 0 {
		t := d.string("response content type", true)
		if d.err == nil && c.Response == nil {
			d.fail("response content type without a response")
		} else if d.err == nil {
			c.Response.ContentType = t
		}
	}
	if m&(1<<fieldLeases) != 0 {
		c.Leases = d.leases()
	}
}

// leases reads a non-empty list of lease lengths, sorted by source, each
// source once (so that the list has one encoding).
func (d *entryDecoder) leases() []LeaseLength {
	n := d.count("lease length count", 3)
	if d.err == nil && n == 0 {
		d.fail("lease lengths: present but empty")
	}
	if n <= 0 {
		return nil
	}
	ls := make([]LeaseLength, n)
	for j := range ls {
		ls[j].Source = d.string("lease length source", true)
		ls[j].For = d.nonZeroVarint("lease length")
		if d.err == nil && j > 0 && ls[j-1].Source >= ls[j].Source {
			d.fail("lease lengths: not sorted by source")
		}
	}
	return ls
}

// quotas reads a non-empty list of lease quotas, sorted by source, each
// source once (so that the list has one encoding).
func (d *entryDecoder) quotas() []Quota {
	n := d.count("quota count", 3)
	if d.err == nil && n == 0 {
		d.fail("quotas: present but empty")
	}
	if n <= 0 {
		return nil
	}
	qs := make([]Quota, n)
	for j := range qs {
		qs[j].Source = d.string("quota source", true)
		v := d.uvarint("quota")
		if d.err == nil && v>>1 > maxQuota {
			d.fail("quota: too large")
		}
		qs[j].Max, qs[j].Hard = int(v>>1), v&1 != 0
		if d.err == nil && j > 0 && qs[j-1].Source >= qs[j].Source {
			d.fail("quotas: not sorted by source")
		}
	}
	return qs
}

// int32 reads a varint that must fit an int32 (and, if nonZero, not be 0).
func (d *entryDecoder) int32(what string, nonZero bool) int {
	var v int64
	if nonZero {
		v = d.nonZeroVarint(what)
	} else {
		v = d.varint(what)
	}
	if d.err == nil && (v < math.MinInt32 || v > math.MaxInt32) {
		d.fail(what)
	}
	return int(v)
}

// headers reads a non-empty header list.
func (d *entryDecoder) headers() []Header {
	hn := d.count("header count", 2)
	if d.err == nil && hn == 0 {
		d.fail("headers: present but empty")
	}
	if hn <= 0 {
		return nil
	}
	hs := make([]Header, hn)
	for j := range hs {
		hs[j].Name = d.string("header name", false)
		hs[j].Value = d.string("header value", false)
	}
	return hs
}

// response reads a cached response: its status and body.
func (d *entryDecoder) response() *Response {
	st := d.int32("response status", false)
	return &Response{Status: st, Body: d.byteSlice("response body", false)}
}

// keys reads a non-empty list of replay keys.
func (d *entryDecoder) keys() []string {
	kn := d.count("key count", 1)
	if d.err == nil && kn == 0 {
		d.fail("keys: present but empty")
	}
	if kn <= 0 {
		return nil
	}
	ks := make([]string, kn)
	for j := range ks {
		ks[j] = d.string("replay key", false)
	}
	return ks
}

// attempt reads a failed attempt's record.
func (d *entryDecoder) attempt() *Attempt {
	at := &Attempt{At: d.varint("attempt at"), Took: d.varint("attempt took")}
	at.Status = d.int32("attempt status", false)
	at.Error = d.string("attempt error", false)
	at.Body = d.byteSlice("attempt body", false)
	return at
}
