package api

import (
	"encoding/json"
	"strconv"
)

// jsonNumber gives an integer parameter the representation the validator expects for numbers.
func jsonNumber(n int64) json.Number { return json.Number(strconv.FormatInt(n, 10)) }
