import os
import tempfile

# Every test run gets its own LOCALCHAT_HOME, so no test reads or writes the user's folders.
os.environ.setdefault("LOCALCHAT_HOME", tempfile.mkdtemp(prefix="localchat-test-home-"))
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
