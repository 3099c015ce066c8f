package admin

import "net/http"

type httpRequest = http.Request

var readReq = http.ReadRequest
