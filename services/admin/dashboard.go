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
// charts drawn with the vendored uPlot in charts.js, the Fleet page's
// sparklines in fleet.js, the Usage page in usage.js, the Clients page in
// clients.js, the Configuration page in config.js, the Requests page and
// its debug bundle timelines in requests.js) and its stylesheets,
// embedded in the binary (no CDN: nothing is fetched from the internet at
// run time).
//
//go:embed web/index.html.tmpl web/*.js web/app.css web/openapi.json web/vendor/uplot
var web embed.FS

// assets are the files GET /assets/{file} serves, by name.
var assets = map[string]string{
	"app.js": "web/app.js", "charts.js": "web/charts.js", "fleet.js": "web/fleet.js", "usage.js": "web/usage.js",
	"clients.js": "web/clients.js", "config.js": "web/config.js", "requests.js": "web/requests.js", "app.css": "web/app.css",
	"uPlot.iife.min.js": "web/vendor/uplot/uPlot.iife.min.js", "uPlot.min.css": "web/vendor/uplot/uPlot.min.css",
	"uPlot.LICENSE.txt": "web/vendor/uplot/LICENSE",
}

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

// asset: GET /assets/{file}: the scripts, the stylesheets and uPlot's
// licence.
func (s *Service) asset(c *fiber.Ctx) error {
	name := path.Base(c.Params("file"))
	file, ok := assets[name]
	if !ok {
		return apiError(c, fiber.StatusNotFound, codeNotFound, "no asset "+name)
	}
	b, err := fs.ReadFile(web, file)
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
