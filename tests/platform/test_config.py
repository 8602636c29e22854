from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config import DEFAULT_TASK_QUEUE, load_settings
from orchestrator.exceptions import ConfigError

# Every test passes an explicit environment, so the developer's own variables
# and ~/.config/temporalio never leak in.
BASE = {"HOME": "/nonexistent", "TEMPORAL_CONFIG_FILE": "/nonexistent/temporal.toml"}


def env(**extra: str) -> dict[str, str]:
    return {**BASE, **extra}


class TestDefaults:
    """With nothing set, the settings point at the local dev server and lab."""

    def test_local_defaults(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.chdir(tmp_path)
        settings = load_settings(env())
        assert settings.temporal.address == "127.0.0.1:7233"
        assert settings.temporal.namespace == "default"
        assert settings.temporal.tls is False
        assert settings.task_queue == DEFAULT_TASK_QUEUE
        assert settings.fleet_url == "http://127.0.0.1:8080"
        assert settings.fleet_verify_tls is True


class TestTemporalEnvConfig:
    """Temporal's own variables and TOML profiles decide how the client connects."""

    def test_address_namespace_and_api_key(self) -> None:
        settings = load_settings(
            env(
                TEMPORAL_ADDRESS="my-ns.a1b2c.tmprl.cloud:7233",
                TEMPORAL_NAMESPACE="my-ns.a1b2c",
                TEMPORAL_API_KEY="sekrit-api-key",
            )
        )
        kwargs = settings.temporal.connect_kwargs()
        assert kwargs["target_host"] == "my-ns.a1b2c.tmprl.cloud:7233"
        assert kwargs["namespace"] == "my-ns.a1b2c"
        assert kwargs["api_key"] == "sekrit-api-key"
        # An API key implies TLS with system roots, as Temporal Cloud needs.
        assert kwargs["tls"] is True
        assert "sekrit-api-key" not in repr(settings)

    def test_mtls_files_from_a_toml_profile(self, tmp_path: Path) -> None:
        cert, key, ca = tmp_path / "client.pem", tmp_path / "client.key", tmp_path / "ca.pem"
        cert.write_text("CERT")
        key.write_text("KEY")
        ca.write_text("CA")
        profile = tmp_path / "temporal.toml"
        profile.write_text(
            f"""
[profile.prod]
address = "temporal.internal:7233"
namespace = "dr"
[profile.prod.tls]
client_cert_path = "{cert}"
client_key_path = "{key}"
server_ca_cert_path = "{ca}"
server_name = "temporal.internal"
"""
        )
        settings = load_settings(
            {
                "HOME": "/nonexistent",
                "TEMPORAL_CONFIG_FILE": str(profile),
                "TEMPORAL_PROFILE": "prod",
            }
        )
        tls = settings.temporal.connect_kwargs()["tls"]
        assert settings.temporal.address == "temporal.internal:7233"
        assert settings.temporal.namespace == "dr"
        assert tls.client_cert == b"CERT"
        assert tls.client_private_key == b"KEY"
        assert tls.server_root_ca_cert == b"CA"
        assert tls.domain == "temporal.internal"

    def test_bad_address_names_the_variable(self) -> None:
        with pytest.raises(ConfigError, match="TEMPORAL_ADDRESS"):
            load_settings(env(TEMPORAL_ADDRESS="no-port-here"))


class TestOrchestratorSettings:
    """Our settings come from ORCHESTRATOR_* or the TOML file; errors name the setting."""

    def test_environment_wins_over_file(self, tmp_path: Path) -> None:
        config = tmp_path / "orchestrator.toml"
        config.write_text('[orchestrator]\ntask_queue = "from-file"\nfleet_timeout_s = 3\n')
        settings = load_settings(
            env(ORCHESTRATOR_CONFIG=str(config), ORCHESTRATOR_TASK_QUEUE="from-env")
        )
        assert settings.task_queue == "from-env"
        assert settings.fleet_timeout_s == 3

    @pytest.mark.parametrize(
        ("variable", "value"),
        [
            ("ORCHESTRATOR_FLEET_URL", "ftp://fleet"),
            ("ORCHESTRATOR_FLEET_TIMEOUT_S", "-1"),
            ("ORCHESTRATOR_FLEET_VERIFY_TLS", "perhaps"),
            ("ORCHESTRATOR_METRICS_ADDRESS", "9000"),
            ("ORCHESTRATOR_LOG_LEVEL", "LOUD"),
        ],
    )
    def test_invalid_value_names_the_variable(self, variable: str, value: str) -> None:
        with pytest.raises(ConfigError) as caught:
            load_settings(env(**{variable: value}))
        assert caught.value.setting == variable
        assert variable in str(caught.value)
        assert "\n" not in str(caught.value)

    def test_unknown_key_in_file_is_refused(self, tmp_path: Path) -> None:
        config = tmp_path / "orchestrator.toml"
        config.write_text('[orchestrator]\nfleet_ulr = "http://x"\n')
        with pytest.raises(ConfigError, match="fleet_ulr"):
            load_settings(env(ORCHESTRATOR_CONFIG=str(config)))

    def test_broken_toml_names_the_file(self, tmp_path: Path) -> None:
        config = tmp_path / "orchestrator.toml"
        config.write_text("[orchestrator\n")
        with pytest.raises(ConfigError, match="ORCHESTRATOR_CONFIG"):
            load_settings(env(ORCHESTRATOR_CONFIG=str(config)))

    def test_fleet_token_from_a_file(self, tmp_path: Path) -> None:
        token = tmp_path / "token"
        token.write_text("tok-from-file\n")
        settings = load_settings(env(ORCHESTRATOR_FLEET_TOKEN_FILE=str(token)))
        assert settings.fleet_token_value() == "tok-from-file"

    def test_unreadable_token_file_names_the_variable(self, tmp_path: Path) -> None:
        settings = load_settings(env(ORCHESTRATOR_FLEET_TOKEN_FILE=str(tmp_path / "missing")))
        with pytest.raises(ConfigError, match="ORCHESTRATOR_FLEET_TOKEN_FILE"):
            settings.fleet_token_value()


class TestSecretsWhateverTheirShape:
    """A token loses surrounding whitespace at load; a control character inside is refused
    with one line naming the setting, never showing the value."""

    def test_trailing_newline_in_the_environment_is_stripped(self) -> None:
        settings = load_settings(env(ORCHESTRATOR_FLEET_TOKEN="tok-from-env\n"))
        assert settings.fleet_token_value() == "tok-from-env"

    def test_whitespace_around_a_token_file_is_stripped(self, tmp_path: Path) -> None:
        token = tmp_path / "token"
        token.write_text("  tok-from-file \r\n")
        settings = load_settings(env(ORCHESTRATOR_FLEET_TOKEN_FILE=str(token)))
        assert settings.fleet_token_value() == "tok-from-file"

    def test_temporal_api_key_is_stripped(self) -> None:
        settings = load_settings(env(TEMPORAL_API_KEY="api-key-value\n"))
        assert settings.temporal.connect_kwargs()["api_key"] == "api-key-value"

    @pytest.mark.parametrize("inner", ["\n", "\r", "\x00", "\x1b", "\x7f"])
    def test_inner_control_character_is_refused_by_name(self, inner: str) -> None:
        with pytest.raises(ConfigError) as caught:
            load_settings(env(ORCHESTRATOR_FLEET_TOKEN=f"abc{inner}defgh"))
        assert caught.value.setting == "ORCHESTRATOR_FLEET_TOKEN"
        assert "control character" in str(caught.value)
        assert "defgh" not in str(caught.value) and "\n" not in str(caught.value)

    def test_token_file_with_two_lines_is_refused_by_name(self, tmp_path: Path) -> None:
        token = tmp_path / "token"
        token.write_text("first-line\nsecond-line\n")
        settings = load_settings(env(ORCHESTRATOR_FLEET_TOKEN_FILE=str(token)))
        with pytest.raises(ConfigError) as caught:
            settings.fleet_token_value()
        assert caught.value.setting == "ORCHESTRATOR_FLEET_TOKEN_FILE"
        assert "second-line" not in str(caught.value)

    def test_token_in_the_file_names_its_key(self, tmp_path: Path) -> None:
        config = tmp_path / "orchestrator.toml"
        config.write_text('[orchestrator]\nfleet_token = "abc\\u0007defgh"\n')
        with pytest.raises(ConfigError) as caught:
            load_settings(env(ORCHESTRATOR_CONFIG=str(config)))
        assert caught.value.setting == "fleet_token"
        assert "defgh" not in str(caught.value)
