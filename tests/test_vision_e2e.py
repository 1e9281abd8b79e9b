"""Images in chat over real HTTP: SmolLM2 served with a tiny projector made by the tests
(tests/fixtures/make_tiny_vlm.py: seeded random weights, so it proves the plumbing, not vision),
through the OpenAI SDK (data URIs and an http URL from a local server, whole and streamed) and
plain HTTP: different images steer the greedy answer, the same image gives the same one, usage
counts image tokens, the prefix cache reuses an image, and bad images get 400s naming the part."""

from __future__ import annotations

import asyncio
import base64
import http.server
import threading

import httpx
import pytest

from app.media.fetch import MediaError, MediaPolicy, media_bytes
from tests.built import tiny_vlm
from tests.conftest import POOL
from tests.fixtures.make_tiny_vlm import IMAGE_TOKENS
from tests.images import mp4, noise, png

QUESTION = "What is in this picture?"


@pytest.fixture(scope="module")
def vision_server(model_path):
    _, projector = tiny_vlm()
    return POOL.get("--model", str(model_path), "--alias", "vlm", "--mmproj", str(projector),
                    "--model", str(model_path), "--alias", "plain", "--ctx-size", "512", "--parallel", "2",
                    "--allow-private-media-urls")


@pytest.fixture(scope="module")
def image_site():
    """A local web server with two images, and a redirect to one of them."""
    pages = {"/a.png": png(noise(1)), "/b.png": png(noise(2))}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/moved":
                self.send_response(302)
                self.send_header("Location", "/a.png")
                self.end_headers()
                return
            body = pages.get(self.path)
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args: object) -> None:
            pass

    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{site.server_address[1]}"
    site.shutdown()


def data_uri(seed: int) -> str:
    return "data:image/png;base64," + base64.b64encode(png(noise(seed))).decode()


def image_message(url: str, text: str = QUESTION) -> list[dict]:
    return [{"role": "user", "content": [{"type": "text", "text": text},
                                         {"type": "image_url", "image_url": {"url": url}}]}]


def chat(server, messages: list[dict], model: str = "vlm", **fields) -> httpx.Response:
    return httpx.post(f"{server.v1}/chat/completions", timeout=120, json={
        "model": model, "messages": messages, "max_tokens": 12, "temperature": 0, **fields})


def test_images_steer_the_answer_through_the_openai_sdk(vision_server) -> None:
    import openai

    with openai.OpenAI(base_url=vision_server.v1, api_key="unused", max_retries=0) as client:
        def ask(url: str) -> openai.types.chat.ChatCompletion:
            return client.chat.completions.create(model="vlm", messages=image_message(url), max_tokens=12,
                                                  temperature=0, logprobs=True)
        a, again, b = ask(data_uri(1)), ask(data_uri(1)), ask(data_uri(2))
        text_only = client.chat.completions.create(model="vlm", max_tokens=1, temperature=0, messages=[
            {"role": "user", "content": [{"type": "text", "text": QUESTION}]}])
        chunks = list(client.chat.completions.create(model="vlm", messages=image_message(data_uri(1)),
                                                     max_tokens=12, temperature=0, stream=True))
    # the image steers the model: its scores differ (whether its 12 greedy tokens do is the model's)
    assert [t.logprob for t in a.choices[0].logprobs.content] != [t.logprob for t in b.choices[0].logprobs.content]
    assert again.choices[0].message.content == a.choices[0].message.content
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == a.choices[0].message.content
    assert a.usage.prompt_tokens >= text_only.usage.prompt_tokens + IMAGE_TOKENS  # image tokens are counted
    assert again.usage.prompt_tokens_details.cached_tokens >= a.usage.prompt_tokens - 3  # the image was reused
    assert b.usage.prompt_tokens_details.cached_tokens < a.usage.prompt_tokens - IMAGE_TOKENS  # not another


def test_an_http_image_url_is_fetched(vision_server, image_site) -> None:
    by_url = chat(vision_server, image_message(f"{image_site}/a.png"))
    by_redirect = chat(vision_server, image_message(f"{image_site}/moved"))
    by_data = chat(vision_server, image_message(data_uri(1)))
    assert by_url.status_code == 200, by_url.text
    answer = by_data.json()["choices"][0]["message"]["content"]
    assert by_url.json()["choices"][0]["message"]["content"] == answer
    assert by_redirect.json()["choices"][0]["message"]["content"] == answer
    missing = chat(vision_server, image_message(f"{image_site}/none.png"))
    assert missing.status_code == 400 and "HTTP 404" in missing.json()["error"]["message"]


def test_detail_and_max_long_side_pixel_scale_the_image_first(vision_server) -> None:
    big = "data:image/png;base64," + base64.b64encode(png(noise(5, 600))).decode()

    def first_scores(**image_fields) -> list[float]:
        messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": big, **image_fields}}]}]
        response = chat(vision_server, messages, logprobs=True, max_tokens=3)
        assert response.status_code == 200, response.text
        return [entry["logprob"] for entry in response.json()["choices"][0]["logprobs"]["content"]]
    assert first_scores(detail="high") == first_scores()
    assert first_scores(detail="low") != first_scores(max_long_side_pixel=16)


def test_n_choices_share_the_image(vision_server) -> None:
    response = chat(vision_server, image_message(data_uri(3)), n=2)
    assert response.status_code == 200, response.text
    first, second = (c["message"]["content"] for c in response.json()["choices"])
    assert first == second  # greedy, the same prompt and image


def test_text_that_looks_like_a_media_marker_is_text(vision_server) -> None:
    messages = [{"role": "user", "content": "<__media__> <__image__> <image> <start_of_image>"}]
    response, plain = chat(vision_server, messages), chat(vision_server, messages, model="plain")
    assert response.status_code == 200, response.text
    # the same tokens as on the model that reads no images: no image slot was made
    assert response.json()["usage"]["prompt_tokens"] == plain.json()["usage"]["prompt_tokens"]
    assert response.json()["choices"][0]["message"] == plain.json()["choices"][0]["message"]


@pytest.mark.parametrize(("part", "words"), [
    ({"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8="}}, "not an image"),
    ({"type": "image_url", "image_url": {"url": "data:image/png;base64,!!!"}}, "base64"),
    ({"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}, "file://"),
    ({"type": "image_url", "image_url": {"url": "mm_file://abc"}}, "Files API"),
    ({"type": "image_url", "image_url": {"url": "ftp://example.com/a.png"}}, "data: URI or an http(s) URL"),
    ({"type": "image_url", "image_url": {"url": "data:,", "detail": "tiny"}}, "detail is one of low, high, auto"),
    ({"type": "image_url", "image_url": {"url": "data:,", "max_long_side_pixel": 0}}, "max_long_side_pixel"),
    ({"type": "image_url", "image_url": {"url": "data:,"}}, "empty"),
    ({"type": "video_url", "video_url": {"url": "data:video/mp4;base64,aGVsbG8="}}, "not a video"),
])
def test_bad_images_get_a_400_naming_the_part(vision_server, part, words) -> None:
    response = chat(vision_server, [{"role": "user", "content": [{"type": "text", "text": "Hi"}, part]}])
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert words in error["message"] and "messages[0].content[1]" in error["message"]
    assert chat(vision_server, image_message(data_uri(1))).status_code == 200  # the others go on


def test_a_model_without_a_projector_refuses_images(vision_server) -> None:
    response = chat(vision_server, image_message(data_uri(1)), model="plain")
    assert response.status_code == 400 and "does not accept images" in response.json()["error"]["message"]
    models = {m["id"]: m for m in httpx.get(f"{vision_server.v1}/models").json()["data"]}
    assert "vision" in models["vlm"]["capabilities"] and "vision" not in models["plain"]["capabilities"]


def test_private_addresses_are_refused_by_default(image_site) -> None:
    with pytest.raises(MediaError, match="loopback, private or link-local"):
        asyncio.run(media_bytes(f"{image_site}/a.png", MediaPolicy()))
    assert asyncio.run(media_bytes(f"{image_site}/a.png", MediaPolicy(allow_private=True))) == png(noise(1))
    with pytest.raises(MediaError, match="at most 100 are read"):
        asyncio.run(media_bytes(f"{image_site}/a.png", MediaPolicy(allow_private=True, max_bytes=100)))


def complete(server, **fields) -> httpx.Response:
    return httpx.post(f"{server.v1}/completions", timeout=120, json={
        "model": "vlm", "max_tokens": 10, "temperature": 0, **fields})


def test_completions_put_each_image_at_its_placeholder(vision_server) -> None:
    prompt = "Picture: <image>\nWhat it shows:"
    a = complete(vision_server, prompt=prompt, images=[data_uri(1)], logprobs=1)
    b = complete(vision_server, prompt=prompt, images=[data_uri(2)], logprobs=1)
    both = complete(vision_server, prompt=[prompt, prompt], images=[[data_uri(2)], [data_uri(1)]], logprobs=1)
    assert a.status_code == 200, a.text

    def scores(choice: dict) -> list[float]:  # the image shows in the model's numbers, if not in its words
        return choice["logprobs"]["token_logprobs"]
    score_a, score_b = scores(a.json()["choices"][0]), scores(b.json()["choices"][0])
    assert score_a != score_b
    in_pair = [scores(c) for c in sorted(both.json()["choices"], key=lambda c: c["index"])]
    assert max(abs(x - y) for x, y in zip(in_pair[0], score_b)) < 0.05
    assert max(abs(x - y) for x, y in zip(in_pair[1], score_a)) < 0.05
    plain = complete(vision_server, prompt="Picture: \nWhat it shows:")
    assert a.json()["usage"]["prompt_tokens"] >= plain.json()["usage"]["prompt_tokens"] + IMAGE_TOKENS


@pytest.mark.parametrize(("fields", "words"), [
    ({"prompt": "No placeholder here", "images": ["data:,x"]}, "0 <image> placeholders for 1 images"),
    ({"prompt": [1, 2, 3], "images": ["data:,x"]}, "token ids"),
    ({"prompt": ["<image>", "<image>"], "images": [["data:,x"]]}, "1 lists for 2 prompts"),
    ({"prompt": "<image> and", "images": ["data:image/png;base64,aGVsbG8="]}, "images[0]: the data is not an image"),
])
def test_completions_images_that_do_not_fit_get_a_400(vision_server, fields, words) -> None:
    response = complete(vision_server, **fields)
    assert response.status_code == 400, response.text
    assert words in response.json()["error"]["message"] and response.json()["error"]["param"] == "images"


def test_the_fireworks_sdk_sends_images_whole_and_streamed(vision_server) -> None:
    import fireworks

    with fireworks.Fireworks(base_url=vision_server.base_url, api_key="unused", max_retries=0) as client:
        whole = client.chat.completions.create(model="vlm", messages=image_message(data_uri(1)), max_tokens=12,
                                               temperature=0)
        chunks = list(client.chat.completions.create(model="vlm", messages=image_message(data_uri(1)),
                                                     max_tokens=12, temperature=0, stream=True))
    expected = chat(vision_server, image_message(data_uri(1))).json()["choices"][0]["message"]["content"]
    assert whole.choices[0].message.content == expected
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == expected



def video_message(video: bytes, **fields) -> list[dict]:
    url = "data:video/mp4;base64," + base64.b64encode(video).decode()
    return [{"role": "user", "content": [{"type": "text", "text": "What happens?"},
                                         {"type": "video_url", "video_url": {"url": url, **fields}}]}]


def test_a_video_is_read_as_sampled_frames(vision_server) -> None:
    clip = mp4(20)  # 2 s at 10 frames per second

    def prompt_tokens(**fields) -> int:
        response = chat(vision_server, video_message(clip, **fields), max_tokens=2)
        assert response.status_code == 200, response.text
        return response.json()["usage"]["prompt_tokens"]
    one, three = prompt_tokens(max_frames=1), prompt_tokens(fps=2, max_frames=3)
    per_frame = (three - one) // 2
    assert per_frame >= IMAGE_TOKENS and three - one == 2 * per_frame
    assert prompt_tokens(sample_fps=1, max_frames=10) == one + per_frame  # 1 per second of 2 s: 2 frames
    assert prompt_tokens(fps=2, max_frames=3, spatial_limit=16) == three  # smaller frames, as many tokens
    other = chat(vision_server, video_message(mp4(20, seed=1), max_frames=1), logprobs=True, max_tokens=3)
    this = chat(vision_server, video_message(clip, max_frames=1), logprobs=True, max_tokens=3)
    assert [e["logprob"] for e in other.json()["choices"][0]["logprobs"]["content"]] != \
        [e["logprob"] for e in this.json()["choices"][0]["logprobs"]["content"]]


@pytest.mark.parametrize(("fields", "words"), [
    ({"fps": 0}, "fps must be above 0"),
    ({"fps": 1, "sample_fps": 2}, "disagree"),
    ({"max_frames": 0}, "max_frames must be 1 to 64"),
    ({"detail": "tiny"}, "detail is one of low, default, high"),
    ({"spatial_limit": 0}, "spatial_limit must be 1 or more"),
])
def test_video_fields_that_cannot_apply_get_a_400(vision_server, fields, words) -> None:
    response = chat(vision_server, video_message(mp4(2), **fields))
    assert response.status_code == 400 and words in response.json()["error"]["message"], response.text


def test_data_that_is_not_a_video_gets_a_400(vision_server) -> None:
    response = chat(vision_server, video_message(b"no video here"))
    assert response.status_code == 400 and "not a video" in response.json()["error"]["message"]
    plain = chat(vision_server, video_message(mp4(2)), model="plain")
    assert plain.status_code == 400 and "is a video" in plain.json()["error"]["message"]


def test_the_next_turn_of_a_chat_reuses_its_image(vision_server) -> None:
    key = {"prompt_cache_isolation_key": "next-turn"}
    first_turn = image_message(data_uri(8))
    first = chat(vision_server, first_turn, **key)
    answer = first.json()["choices"][0]["message"]["content"]
    second_turn = [*first_turn, {"role": "assistant", "content": answer}, {"role": "user", "content": "And then?"}]
    second = chat(vision_server, second_turn, **key)
    assert second.status_code == 200, second.text
    # everything of the first turn's prompt, its image included, comes from the cache
    assert second.json()["usage"]["prompt_tokens_details"]["cached_tokens"] >= first.json()["usage"]["prompt_tokens"] - 1
