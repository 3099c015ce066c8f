package intake

// The ordering guard's fields: on a source with `order`, a delivery must
// carry the object and a readable time, unless the source says
// missing = "unordered" (docs/architecture.md, Request flow).

import (
	"errors"
	"fmt"

	"oncehook/engine"
	"oncehook/providers"
)

// duplicateMember ends the 400 answer for a body that names a member on a
// field's path twice: the guard would order by one copy while the handler
// reads the other.
const duplicateMember = "a member on its path appears twice in the body (JSON readers disagree on which one counts)"

// order reads the delivery's order object and time (unix nanoseconds). msg
// is "" when both were read, else the text of the 400 answer; obj is ""
// then. The object is scoped by the source ("{source}:{object}", like keys):
// the guard orders the events of one object within one source, and two
// sources that carry the same object id never hold back or mark stale each
// other's events.
//
// always reports a msg that missing = "unordered" does not waive: a member
// named twice is refused on any ordered source.
func (s *Source) order(h providers.Headers, body []byte) (obj string, t int64, msg string, always bool) {
	raw, err := s.orderObject.Value(h, body)
	if errors.Is(err, providers.ErrDuplicateMember) {
		return "", 0, "order: object " + s.orderObject.String() + ": " + duplicateMember, true
	}
	if err != nil || len(raw) == 0 {
		return "", 0, "order: object " + s.orderObject.String() + ": missing, empty or not a string or number", false
	}
	if len(s.name)+1+len(raw) > engine.MaxKeyLen {
		return "", 0, fmt.Sprintf("order: object %s: longer than %d bytes", s.orderObject.String(), engine.MaxKeyLen-len(s.name)-1), false
	}
	tv, err := s.orderTime.Value(h, body)
	if errors.Is(err, providers.ErrDuplicateMember) {
		return "", 0, "order: time " + s.orderTime.String() + ": " + duplicateMember, true
	}
	if err != nil || len(tv) == 0 {
		return "", 0, "order: time " + s.orderTime.String() + ": missing, empty or not a string or number", false
	}
	if t, err = providers.ParseTime(tv); err != nil {
		return "", 0, "order: time " + s.orderTime.String() + ": not a time (unix seconds, milliseconds or RFC 3339)", false
	}
	return s.name + ":" + string(raw), t, "", false
}
