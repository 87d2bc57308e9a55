"""The teacher: a vLLM server the launcher starts or an external OpenAI-compatible endpoint. opd asks it to score
the student's tokens (scoring.py); sft asks it for answers (answers.py), through a chat request fitted to what the
endpoint accepts (chat_api.py), with a cache (cache.py) and usage and cost accounting (usage.py)."""
