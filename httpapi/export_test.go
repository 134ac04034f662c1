package httpapi

import (
	"crypto/sha256"
	"time"
)

// Test access to the request decoders (fuzzing, and the OpenAPI examples).
var (
	DecodeEnqueue   = decodeEnqueue
	DecodeAccept    = decodeAccept
	DecodeHeartbeat = decodeHeartbeat
	DecodeFinish    = decodeFinish
	DecodeFail      = decodeFail
	DecodeSettings  = decodeSettings
	DecodeWorkflow  = decodeWorkflow
	ReadEvents      = readEvents
)

// DecodeLogin decodes the body of POST /v1/login.
var DecodeLogin = decodeLogin

// SessionValue is the session cookie's value for the token of that name
// and secret, ending at end.
func SessionValue(name, secret string, end time.Time) string {
	return sessionValue(&tokenEntry{name: name, hash: sha256.Sum256([]byte(secret))}, end.Unix())
}
