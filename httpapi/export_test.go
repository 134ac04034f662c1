package httpapi

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
