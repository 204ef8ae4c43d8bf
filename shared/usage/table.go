package usage

import (
	"errors"
	"fmt"
)

// Entry prices one model. Its scope is the provider named Provider when
// set, else every provider of type ProviderType when set, else every
// provider serving Model. Model is the name the provider serves, exactly
// as it reports it.
type Entry struct {
	Provider     string
	ProviderType string
	Model        string
	Price        Price
}

// Validate reports what is wrong with e, naming its model: a missing model,
// both scopes given, or a rate that is not a price.
func (e Entry) Validate() error {
	if e.Model == "" {
		return errors.New("price entry: model is empty")
	}
	if e.Provider != "" && e.ProviderType != "" {
		return fmt.Errorf("price entry %s: set provider (%s) or provider_type (%s), not both", e.Model, e.Provider, e.ProviderType)
	}
	if err := e.Price.Validate(); err != nil {
		return fmt.Errorf("price entry %s: %w", e.Model, err)
	}
	return nil
}

// scoped is a model within a provider or a provider type.
type scoped struct{ scope, model string }

// Table answers what a model costs. It is immutable once built, so any
// number of goroutines may read it; to change prices, build a new Table and
// swap the pointer (atomic.Pointer[Table]). A nil *Table knows no prices.
type Table struct {
	byProvider map[scoped]Price
	byType     map[scoped]Price
	byModel    map[string]Price
}

// NewTable indexes defaults, then overrides: an override replaces the
// default with the same provider, provider type and model. An entry with
// both Provider and ProviderType is scoped to the provider; an entry
// without a model is skipped. NewTable does not validate prices: check
// operator entries with Entry.Validate when loading config.
func NewTable(defaults, overrides []Entry) *Table {
	t := &Table{
		byProvider: map[scoped]Price{},
		byType:     map[scoped]Price{},
		byModel:    map[string]Price{},
	}
	for _, list := range [...][]Entry{defaults, overrides} {
		for _, e := range list {
			switch {
			case e.Model == "":
			case e.Provider != "":
				t.byProvider[scoped{e.Provider, e.Model}] = e.Price
			case e.ProviderType != "":
				t.byType[scoped{e.ProviderType, e.Model}] = e.Price
			default:
				t.byModel[e.Model] = e.Price
			}
		}
	}
	return t
}

// Lookup returns the price of model as served by the provider named
// provider, of type providerType. It tries the provider's entries, then
// its type's, then the model's own; within each, model exactly, then model
// without a trailing date (-YYYY-MM-DD or -YYYYMMDD: "gpt-4o-2024-08-06"
// is priced as "gpt-4o" unless it has an entry of its own). Nothing else
// is matched loosely: "gpt-4o-mini" never gets "gpt-4o"'s price. ok is
// false when no entry fits. Lookup does not allocate.
func (t *Table) Lookup(provider, providerType, model string) (Price, bool) {
	if t == nil || model == "" {
		return Price{}, false
	}
	family, dated := withoutDate(model)
	if provider != "" && len(t.byProvider) > 0 {
		if p, ok := inScope(t.byProvider, provider, model, family, dated); ok {
			return p, true
		}
	}
	if providerType != "" && len(t.byType) > 0 {
		if p, ok := inScope(t.byType, providerType, model, family, dated); ok {
			return p, true
		}
	}
	if p, ok := t.byModel[model]; ok {
		return p, true
	}
	if dated {
		if p, ok := t.byModel[family]; ok {
			return p, true
		}
	}
	return Price{}, false
}

// inScope looks model up within scope in m, then its dated family.
func inScope(m map[scoped]Price, scope, model, family string, dated bool) (Price, bool) {
	if p, ok := m[scoped{scope, model}]; ok {
		return p, true
	}
	if dated {
		if p, ok := m[scoped{scope, family}]; ok {
			return p, true
		}
	}
	return Price{}, false
}

// Cost returns the USD cost of t for model as served by provider (of type
// providerType), priced by Lookup. known is false when the model has no
// price: the cost is then unknown, not 0.
func (t *Table) Cost(provider, providerType, model string, tokens Tokens) (usd float64, known bool) {
	p, ok := t.Lookup(provider, providerType, model)
	if !ok {
		return 0, false
	}
	return p.Cost(tokens), true
}

// withoutDate returns model without a trailing snapshot date, -YYYY-MM-DD
// or -YYYYMMDD (year 20YY, month 01-12, day 01-31), and whether it had
// one. Without a date it returns model, false.
func withoutDate(model string) (string, bool) {
	n := len(model)
	if n > 11 && model[n-11] == '-' && model[n-6] == '-' && model[n-3] == '-' &&
		validDate(model[n-10:n-6], model[n-5:n-3], model[n-2:]) {
		return model[:n-11], true
	}
	if n > 9 && model[n-9] == '-' && validDate(model[n-8:n-4], model[n-4:n-2], model[n-2:]) {
		return model[:n-9], true
	}
	return model, false
}

// validDate reports whether year, month and day are digits forming a date
// of this century (day 01-31 whatever the month).
func validDate(year, month, day string) bool {
	num := func(s string) int {
		v := 0
		for i := 0; i < len(s); i++ {
			if s[i] < '0' || s[i] > '9' {
				return -1
			}
			v = v*10 + int(s[i]-'0')
		}
		return v
	}
	y, m, d := num(year), num(month), num(day)
	return y >= 2000 && y <= 2099 && m >= 1 && m <= 12 && d >= 1 && d <= 31
}
