// Package answer is what the gateway and the httplimit middleware answer
// with: the JSON answers (Answer), the rate-limit headers (SetHeaders,
// Reporter, Reported, RetryAfter) and request ids (WellFormedID,
// IDSource).
//
// They are made for rejections to be cheap: an answer's JSON is made once
// but for the request id, the header values that recur are made once and
// shared, and a rejection allocates nothing of its own but a request id it
// makes (one allocation).
package answer
