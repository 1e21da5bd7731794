class FileCacheManager:
    def __init__(self, *args, **kwargs):
        pass
