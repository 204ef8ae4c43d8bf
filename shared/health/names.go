package health

import "encoding/json"

// The health record's fields under the names dashboards are written
// against (passive_success_count, passive_failure_count,
// average_latency_ms, half_open) are written beside the earlier names
// (passive_success, passive_failure, avg_latency_ms), which stay as
// aliases for one release: a record is written with both, and read from
// either (the new name first). half_open is true while circuit_state is
// half-open.

// recordFields is Record without its JSON methods.
type recordFields Record

// recordNames are the new names of Record's fields.
type recordNames struct {
	PassiveSuccessCount *uint64  `json:"passive_success_count"`
	PassiveFailureCount *uint64  `json:"passive_failure_count"`
	AverageLatencyMS    *float64 `json:"average_latency_ms"`
	HalfOpen            bool     `json:"half_open"`
}

// MarshalJSON writes r with its fields under both names.
func (r Record) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		recordFields
		recordNames
	}{recordFields(r), recordNames{&r.PassiveSuccess, &r.PassiveFailure, &r.AvgLatencyMS, r.CircuitState == CircuitHalfOpen}})
}

// UnmarshalJSON reads a record written with either name of a field.
func (r *Record) UnmarshalJSON(b []byte) error {
	var v struct {
		recordFields
		recordNames
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*r = Record(v.recordFields)
	if v.PassiveSuccessCount != nil {
		r.PassiveSuccess = *v.PassiveSuccessCount
	}
	if v.PassiveFailureCount != nil {
		r.PassiveFailure = *v.PassiveFailureCount
	}
	if v.AverageLatencyMS != nil {
		r.AvgLatencyMS = *v.AverageLatencyMS
	}
	return nil
}
