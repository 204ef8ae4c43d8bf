package admin

import (
	"bytes"
	"embed"
	"html/template"
	"io/fs"
	"mime"
	"path"

	"github.com/gofiber/fiber/v2"
)

// web holds the dashboard: one server-rendered page, its scripts (the
// Usage page's charts in usage.js, the Clients page in clients.js, the
// Configuration page in config.js, the Requests page and its debug bundle
// timelines in requests.js) and its
// stylesheet, embedded in the binary (no CDN: nothing is fetched from the
// internet at run time).
//
//go:embed web/index.html.tmpl web/app.js web/usage.js web/clients.js web/config.js web/requests.js web/app.css web/openapi.json
var web embed.FS

var pageTmpl = template.Must(template.ParseFS(web, "web/index.html.tmpl"))

type pageData struct {
	Instance string
	Tokens   bool
	Rotation bool
}

// dashboard: GET /: the page. It carries no fleet data: the script asks
// the API with the token kept in session storage, then follows
// /admin/events.
func (s *Service) dashboard(c *fiber.Ctx) error {
	var b bytes.Buffer
	if err := pageTmpl.Execute(&b, pageData{Instance: s.member.Instance, Tokens: len(s.cfg.Admin.Tokens) > 0, Rotation: s.box != nil}); err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, fiber.MIMETextHTMLCharsetUTF8)
	c.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
	c.Set(fiber.HeaderCacheControl, "no-store")
	return c.Send(b.Bytes())
}

// asset: GET /assets/{file}: the scripts and the stylesheet.
func (s *Service) asset(c *fiber.Ctx) error {
	name := path.Base(c.Params("file"))
	if name != "app.js" && name != "usage.js" && name != "clients.js" && name != "config.js" && name != "requests.js" && name != "app.css" {
		return apiError(c, fiber.StatusNotFound, codeNotFound, "no asset "+name)
	}
	b, err := fs.ReadFile(web, "web/"+name)
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, mime.TypeByExtension(path.Ext(name)))
	c.Set(fiber.HeaderCacheControl, "no-cache")
	return c.Send(b)
}

// openapi: GET /admin/openapi.json (no token needed: it is documentation).
func (s *Service) openapi(c *fiber.Ctx) error {
	b, err := fs.ReadFile(web, "web/openapi.json")
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Send(b)
}
