"""`loom install-service`: a systemd user unit (Restart=always) or a launchd agent (KeepAlive)."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from xml.sax.saxutils import escape

from loomtui.context import Context

UNIT_NAME = "loom.service"
PLIST_LABEL = "dev.loom.supervise"


def command(ctx: Context) -> list[str]:
    argv = [sys.executable, "-m", "loomtui", "supervise", "--state-dir", str(ctx.state_dir)]
    if ctx.config_path is not None:
        argv += ["--config", str(ctx.config_path)]
    return argv


def systemd_unit(ctx: Context) -> str:
    exec_start = " ".join(shlex.quote(a) for a in command(ctx))
    token_env = ctx.config.telegram.token_env
    return f"""[Unit]
Description=Loom supervisor: keeps the agent alive, reachable and honest
After=default.target

[Service]
Type=simple
ExecStart={exec_start}
# A supervisor that exits at all has failed: always start it again.
Restart=always
RestartSec=5
Environment=PATH={os.environ.get('PATH', '/usr/bin:/bin')}
# Put secrets such as {token_env} in this file (mode 0600), never in the unit itself.
EnvironmentFile=-%h/.config/loom/env

[Install]
WantedBy=default.target
"""


def launchd_plist(ctx: Context) -> str:
    args = "\n".join(f"        <string>{escape(a)}</string>" for a in command(ctx))
    log_dir = escape(str(ctx.state_dir))
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
    <key>Label</key>
    <string>{PLIST_LABEL}</string>
    <key>ProgramArguments</key>
    <array>
{args}
    </array>
    <key>KeepAlive</key>
    <true/>
    <key>RunAtLoad</key>
    <true/>
    <key>ThrottleInterval</key>
    <integer>5</integer>
    <key>StandardErrorPath</key>
    <string>{log_dir}/supervise.log</string>
</dict>
</plist>
"""


def target_path(kind: str) -> Path:
    if kind == "systemd":
        base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
        return base / "systemd" / "user" / UNIT_NAME
    return Path.home() / "Library" / "LaunchAgents" / f"{PLIST_LABEL}.plist"


def render(ctx: Context, kind: str) -> str:
    return systemd_unit(ctx) if kind == "systemd" else launchd_plist(ctx)


def install(ctx: Context, kind: str) -> Path:
    path = target_path(kind)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(render(ctx, kind))
    os.replace(tmp, path)
    return path
