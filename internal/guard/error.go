// Package guard holds otpguard's OTP rules: the send pipeline, trust,
// challenges, verification, and the policy file's policies. It counts
// with the limiter's model (package limit) and refuses with package
// problem's errors. It knows nothing of HTTP, SQL or SMS providers; those
// reach it through the small interfaces declared next to the code that
// uses them.
//
// Those interfaces (here, and likewise in ops and resilience) are named for
// the role they play, as a noun: what they keep (Codes, Verifications,
// Blocks, DenyList, AuditLog) or what they do (Counter, Sender, Syncer).
// Never "XStore": the store is Redis (package store), and one
// implementation may play several roles.
package guard

import "errors"

// ErrNotFound is returned by stores when the thing asked for does not exist.
var ErrNotFound = errors.New("not found")

// ErrUnindexed is returned by SaveCode, with the attempts of the code it
// replaced, when the code and its verification record were saved but the
// id's index (the id -> number key, on another master of a Redis Cluster)
// was not: the code verifies, but its record cannot be read by id, so the
// send answers no verification_id. It is not a failure of the number's
// own keys (store.Codes.SaveCode).
var ErrUnindexed = errors.New("the verification id was not indexed")
