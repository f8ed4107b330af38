"""The served console's one HTML page: textual-serve's own page (MIT), with nothing from outside
the machine. Its Roboto Mono came from fonts.googleapis.com; here it is the copy textual-serve
ships, and the page's Content-Security-Policy keeps anything else from loading. Its inline
script carries a per-response nonce instead of `onClick` attributes, so no other inline script
can run, and a `?ping=` URL (textual.js fetches it before connecting) cannot leave the machine."""

from __future__ import annotations

from html import escape
from string import Template

# The files the page loads, by their path under /t/TOKEN/static/: a fixed list, so no request can
# name another file of the machine.
STATIC_FILES = {
    "css/xterm.css": "text/css",
    "js/textual.js": "text/javascript",
    "fonts/RobotoMono-VariableFont_wght.ttf": "font/ttf",
    "fonts/RobotoMono-Italic-VariableFont_wght.ttf": "font/ttf",
    "images/background.png": "image/png",
}


def security_headers(nonce: str | None, ws_url: str | None) -> dict[str, str]:
    """Every response's: nothing from elsewhere, never framed, never cached, and no Referer (the
    page's URL holds the token, and a link clicked in the terminal would carry it away)."""
    script = f"'self' 'nonce-{nonce}'" if nonce else "'self'"
    connect = f"'self' {ws_url}" if ws_url else "'self'"
    csp = (f"default-src 'none'; script-src {script}; style-src 'self' 'unsafe-inline'; "
           f"font-src 'self'; img-src 'self' data:; connect-src {connect}; "
           "frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
    return {
        "Content-Security-Policy": csp,
        "Referrer-Policy": "no-referrer",
        "X-Content-Type-Options": "nosniff",
        "X-Frame-Options": "DENY",
        "Cache-Control": "no-store",
        "Cross-Origin-Resource-Policy": "same-origin",
    }


_PAGE = Template("""<!DOCTYPE html>
<html>
  <head>
    <meta charset="utf-8">
    <meta name="referrer" content="no-referrer">
    <title>$title</title>
    <link rel="stylesheet" href="$static/css/xterm.css" />
    <script src="$static/js/textual.js"></script>
    <style>
      @font-face {
        font-family: "Roboto Mono";
        font-style: normal;
        src: url("$static/fonts/RobotoMono-VariableFont_wght.ttf") format("truetype");
      }
      @font-face {
        font-family: "Roboto Mono";
        font-style: italic;
        src: url("$static/fonts/RobotoMono-Italic-VariableFont_wght.ttf") format("truetype");
      }
      body { background: #0c181f; }
      .dialog-container {
        position: absolute; width: 100vw; height: 100vh; display: flex;
        align-items: center; justify-content: center; z-index: 10;
      }
      .shade {
        position: absolute; width: 100%; height: 100%; background: #0c181f;
        background-image: url("$static/images/background.png");
      }
      .intro {
        width: 640px; height: 240px; font-size: 16px; z-index: 20;
        font-family: "Roboto Mono", menlo, monospace; text-align: center; opacity: 1;
        color: rgba(255, 255, 255, 0.95); background-color: #12232d;
        display: flex; align-items: center; justify-content: center; margin: 32px;
      }
      body.-first-byte .intro-dialog, body.-first-byte .intro-dialog .shade {
        opacity: 0; transition: opacity 0.3s ease-out; display: none;
      }
      body .textual-terminal { opacity: 0; transition: opacity 0.3s ease-out; }
      body.-first-byte .textual-terminal { opacity: 1; transition: opacity 0.3s ease-out; }
      body button {
        padding: 16px 32px; background-color: #5e0ba7; color: rgba(255, 255, 255, 0.95);
        border: none; font-family: "Roboto Mono", menlo, monospace; margin: 16px; display: block;
      }
      button:hover { background: #ac5af4; cursor: pointer; }
      .closed-dialog { opacity: 0; display: none; }
      body.-closed .closed-dialog { opacity: 1; display: flex; }
      #start { display: none; }
      #start.-delay { display: flex; }
    </style>
    <script nonce="$nonce">
      // Start again on the same URL (its ?token= included), without textual-serve's ping.
      function loomRestart() {
        const params = new URLSearchParams(window.location.search);
        params.delete("delay");
        params.delete("ping");
        window.location.href = window.location.pathname + "?" + params.toString();
      }
      document.addEventListener("DOMContentLoaded", () => {
        for (const button of document.querySelectorAll("button.restart")) {
          button.addEventListener("click", loomRestart);
        }
      });
    </script>
  </head>
  <body>
    <div class="dialog-container intro-dialog">
      <div class="shade"></div>
      <div class="intro">
        <div>$title</div>
        <button type="button" class="restart" id="start">Start</button>
      </div>
    </div>
    <div class="dialog-container closed-dialog">
      <div class="shade"></div>
      <div class="intro">
        <div class="message">Session ended.</div>
        <button type="button" class="restart">Restart</button>
      </div>
    </div>
    <div id="terminal" class="textual-terminal" data-session-websocket-url="$ws_url"
         data-font-size="$font_size"></div>
  </body>
</html>
""")


def render(*, title: str, static: str, ws_url: str, nonce: str, font_size: int) -> str:
    return _PAGE.substitute(title=escape(title), static=escape(static), ws_url=escape(ws_url),
                            nonce=escape(nonce), font_size=font_size)
