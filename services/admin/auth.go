package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"strings"

	"github.com/gofiber/fiber/v2"

	"switchyard.dev/shared/config"
)

// authenticator checks admin bearer tokens. Tokens are compared as
// SHA-256 digests with subtle.ConstantTimeCompare, every configured token
// each time, so neither the match nor the length leaks through timing.
// Gateway client keys are not admin tokens: they never match.
type authenticator struct {
	tokens []authToken
}

type authToken struct {
	id     string
	role   string
	digest [32]byte
}

func newAuthenticator(toks []config.AdminToken) *authenticator {
	a := &authenticator{}
	for _, t := range toks {
		if t.Value.IsZero() {
			continue
		}
		a.tokens = append(a.tokens, authToken{id: t.ID, role: t.Role, digest: sha256.Sum256([]byte(t.Value.Reveal()))})
	}
	return a
}

// identify returns the token matching the presented one, if any.
func (a *authenticator) identify(presented string) (authToken, bool) {
	d := sha256.Sum256([]byte(presented))
	var found authToken
	ok := 0
	for _, t := range a.tokens {
		if subtle.ConstantTimeCompare(d[:], t.digest[:]) == 1 {
			found = t
			ok = 1
		}
	}
	return found, ok == 1
}

// localToken and localRole are the fiber.Locals keys of the
// authenticated token's id and role.
const (
	localToken = "admin_token"
	localRole  = "admin_role"
)

// require returns a handler that admits requests carrying a token with
// role (operator includes read): 401 without a valid token, 403 with a
// read token on an operator route.
func (a *authenticator) require(role string) fiber.Handler {
	return func(c *fiber.Ctx) error {
		h := c.Get(fiber.HeaderAuthorization)
		scheme, tok, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
			c.Set(fiber.HeaderWWWAuthenticate, `Bearer realm="switchyard-admin"`)
			msg := "missing bearer token (Authorization: Bearer <admin token>)"
			if len(a.tokens) == 0 {
				msg = "no admin tokens are configured (admin.tokens): the admin API is closed"
			}
			return apiError(c, fiber.StatusUnauthorized, codeUnauthorized, msg)
		}
		t, found := a.identify(strings.TrimSpace(tok))
		if !found {
			c.Set(fiber.HeaderWWWAuthenticate, `Bearer realm="switchyard-admin", error="invalid_token"`)
			return apiError(c, fiber.StatusUnauthorized, codeUnauthorized, "invalid admin token")
		}
		if role == config.RoleOperator && t.role != config.RoleOperator {
			return apiError(c, fiber.StatusForbidden, codeForbidden, "token "+t.id+" has role "+t.role+"; this needs role operator")
		}
		c.Locals(localToken, t.id)
		c.Locals(localRole, t.role)
		return c.Next()
	}
}

// tokenID is the id of the request's admin token.
func tokenID(c *fiber.Ctx) string {
	id, _ := c.Locals(localToken).(string)
	return id
}

// tokenRole is the role of the request's admin token (read, operator).
func tokenRole(c *fiber.Ctx) string {
	r, _ := c.Locals(localRole).(string)
	return r
}
