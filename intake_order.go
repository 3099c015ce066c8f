package main

// The ordering guard's fields: on a source with `order`, a delivery must
// carry the object and a readable time, unless the source says
// missing = "unordered" (docs/architecture.md, Request flow).

import "oncehook/providers"

// order reads the delivery's order object and time (unix nanoseconds). msg
// is "" when both were read, else the text of the 400 answer; obj is nil
// then. obj may alias body or the header's memory.
func (s *source) order(h providers.Headers, body []byte) (obj []byte, t int64, msg string) {
	obj, err := s.orderObject.Value(h, body)
	if err != nil || len(obj) == 0 {
		return nil, 0, "order: object " + s.orderObject.String() + ": missing, empty or not a string or number"
	}
	tv, err := s.orderTime.Value(h, body)
	if err != nil || len(tv) == 0 {
		return nil, 0, "order: time " + s.orderTime.String() + ": missing, empty or not a string or number"
	}
	if t, err = providers.ParseTime(tv); err != nil {
		return nil, 0, "order: time " + s.orderTime.String() + ": not a time (unix seconds, milliseconds or RFC 3339)"
	}
	return obj, t, ""
}
